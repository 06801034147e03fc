"""Where LightkubeClient finds its cluster (kubeconfig, KUBECONFIG, ~/.kube/config,
in-cluster credentials), what it says when it finds none, that credentials reach the
server but never an error message, and that the kind table agrees with lightkube and
with the CRDs."""

from __future__ import annotations

import shutil
from pathlib import Path

import certifi
import pytest
import yaml

from k8s_validate import SCHEMAS, require_schemas
from kube_emulator import KubeEmulator, sample
from taugrid.executors.kubernetes.client import KINDS, KubeConfigError, NotFound, ObjectRef
from taugrid.executors.kubernetes.lightkube_client import (
    LightkubeClient,
    api_path,
    lightkube_resource,
)

pytestmark = pytest.mark.timeout(20)

JOB = ObjectRef("batch/v1", "Job", "team-a", "mnist-1")


def kubeconfig(path: Path, contexts: dict[str, str], current: str, token: str = "t") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": n, "cluster": {"server": s}} for n, s in contexts.items()],
                "users": [{"name": n, "user": {"token": f"{token}-{n}"}} for n in contexts],
                "contexts": [{"name": n, "context": {"cluster": n, "user": n}} for n in contexts],
                "current-context": current,
            }
        )
    )
    return path


def test_kubeconfig_context_is_chosen(tmp_path: Path, kube_emulator: KubeEmulator):
    path = kubeconfig(tmp_path / "kc", {"a": "http://127.0.0.1:1", "b": kube_emulator.url}, "a")
    with LightkubeClient.from_kubeconfig(path, "b") as client:
        assert client.server == kube_emulator.url
        assert client.list("batch/v1", "Job", "team-a").items == []
    assert kube_emulator.requests("list")[0].headers["Authorization"] == "Bearer t-b"
    with LightkubeClient.from_kubeconfig(path) as client:
        assert client.server == "http://127.0.0.1:1"  # current-context


def test_a_missing_context_or_file_is_a_config_error(tmp_path: Path):
    path = kubeconfig(tmp_path / "kc", {"a": "http://127.0.0.1:1"}, "a")
    with pytest.raises(KubeConfigError, match=r"kubeconfig .*kc: Context 'nope' not found"):
        LightkubeClient.from_kubeconfig(path, "nope")
    with pytest.raises(KubeConfigError, match=r"kubeconfig .*missing: .*not found"):
        LightkubeClient.from_kubeconfig(tmp_path / "missing")


def test_a_kubeconfig_without_a_user_talks_anonymously(tmp_path: Path, kube_emulator: KubeEmulator):
    path = tmp_path / "kc"
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": kube_emulator.url}}],
                "contexts": [{"name": "c", "context": {"cluster": "c"}}],
                "current-context": "c",
            }
        )
    )
    with LightkubeClient.from_kubeconfig(path) as client:
        assert client.list("v1", "Namespace").items == []
    assert "Authorization" not in kube_emulator.requests("list")[0].headers


def test_the_token_reaches_the_server_but_no_error_message(
    tmp_path: Path, kube_emulator: KubeEmulator
):
    token = "sha256~very-secret-token"
    path = kubeconfig(tmp_path / "kc", {"k": kube_emulator.url}, "k", token=token)
    with LightkubeClient.from_kubeconfig(path, retry_budget_s=0) as client:
        with pytest.raises(NotFound) as not_found:
            client.get(JOB)
        kube_emulator.fail_next("create", 500)
        with pytest.raises(Exception) as server_error:
            client.create(sample("Job", "x"))
    assert kube_emulator.requests("get")[0].headers["Authorization"] == f"Bearer {token}-k"
    for err in (not_found.value, server_error.value):
        assert token not in str(err) and token not in repr(err.__dict__)


def test_from_environment_merges_the_files_of_kubeconfig_first_wins(
    tmp_path: Path, kube_emulator: KubeEmulator
):
    first = kubeconfig(tmp_path / "one", {"shared": kube_emulator.url}, "shared")
    second = kubeconfig(
        tmp_path / "two", {"shared": "http://127.0.0.1:1", "other": "http://127.0.0.1:2"}, "other"
    )
    env = {"KUBECONFIG": f"{tmp_path / 'absent'}:{first}:{second}"}
    with LightkubeClient.from_environment(environ=env, home=tmp_path) as client:
        assert client.server == kube_emulator.url  # first file's current-context and cluster
        assert client.list("batch/v1", "Job", "team-a").items == []
    with LightkubeClient.from_environment("other", environ=env, home=tmp_path) as client:
        assert client.server == "http://127.0.0.1:2"  # only in the second file


def test_from_environment_uses_home_kube_config_when_kubeconfig_is_unset(tmp_path: Path):
    (tmp_path / ".kube").mkdir()
    kubeconfig(tmp_path / ".kube" / "config", {"home": "http://127.0.0.1:3"}, "home")
    with LightkubeClient.from_environment(environ={}, home=tmp_path) as client:
        assert client.server == "http://127.0.0.1:3"


def test_from_environment_uses_in_cluster_credentials_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("in-cluster-token")
    (account / "namespace").write_text("taugrid")
    shutil.copy(certifi.where(), account / "ca.crt")  # any valid CA bundle
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    client = LightkubeClient.from_environment(
        environ=env, home=tmp_path, service_account=str(account)
    )
    with client:
        assert client.server == "https://10.0.0.1:443"


def test_from_environment_says_what_it_looked_for(tmp_path: Path):
    with pytest.raises(KubeConfigError) as caught:
        LightkubeClient.from_environment(
            environ={}, home=tmp_path, service_account=str(tmp_path / "sa")
        )
    message = caught.value.message
    assert "KUBECONFIG is unset" in message
    assert str(tmp_path / ".kube" / "config") in message
    assert str(tmp_path / "sa") in message and "KUBERNETES_SERVICE_HOST" in message
    with pytest.raises(KubeConfigError, match=r"KUBECONFIG names no existing file \(.*nope\)"):
        LightkubeClient.from_environment(environ={"KUBECONFIG": str(tmp_path / "nope")})


@pytest.mark.parametrize(("api_version", "kind"), sorted(KINDS))
def test_the_kind_table_agrees_with_lightkube(api_version: str, kind: str):
    from lightkube.core import resource as lk

    info = KINDS[(api_version, kind)]
    res = lightkube_resource(api_version, kind)
    assert lk.api_info(res).plural == info.plural
    assert lk.api_info(res).resource.kind == kind
    assert issubclass(res, lk.NamespacedResource) == info.namespaced
    ns = "team-a" if info.namespaced else None
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    middle = "/namespaces/team-a" if info.namespaced else ""
    assert api_path(api_version, kind, ns, "x") == f"{prefix}{middle}/{info.plural}/x"


def test_the_custom_kinds_agree_with_the_crds():
    require_schemas()
    crds = {}
    for path in [*SCHEMAS.glob("kueue/*.yaml"), *SCHEMAS.glob("kuberay/*.yaml")]:
        head = path.read_text().split("\n  versions:")[0]  # group, names, scope
        spec = yaml.safe_load(head)["spec"]
        crds[(spec["group"], spec["names"]["kind"])] = spec
    custom = {
        k: v
        for k, v in KINDS.items()
        if "." in (group := k[0].partition("/")[0]) and not group.endswith(".k8s.io")
    }
    assert len(custom) == 8
    for (api_version, kind), info in custom.items():
        spec = crds[(api_version.partition("/")[0], kind)]
        assert spec["names"]["plural"] == info.plural
        assert (spec["scope"] == "Namespaced") == info.namespaced
