"""How API failures come out of LightkubeClient: one KubeError subclass per kind of answer,
each message one line naming the verb, the kind, namespace/name and the API's message."""

from __future__ import annotations

import socket

import pytest

from kube_emulator import KubeEmulator, Sleeps, sample
from taugrid.errors import TauError
from taugrid.executors.kubernetes.client import (
    AlreadyExists,
    Conflict,
    FieldCause,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    ObjectRef,
    ServerError,
    TooManyRequests,
    Unreachable,
)
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient

pytestmark = pytest.mark.timeout(20)

JOB = ObjectRef("batch/v1", "Job", "team-a", "mnist-1")


def test_missing_object_is_not_found(kube: LightkubeClient):
    with pytest.raises(NotFound) as caught:
        kube.get(JOB)
    err = caught.value
    assert isinstance(err, KubeError) and isinstance(err, TauError)
    assert err.code == "kube_not_found"
    assert (err.verb, err.ref, err.status) == ("get", JOB, 404)
    assert err.message.startswith("get Job team-a/mnist-1: ")
    assert "The object is not found" in err.message and err.message.endswith("(HTTP 404)")
    assert "\n" not in err.message


def test_create_of_a_taken_name_is_already_exists(kube: LightkubeClient):
    kube.create(sample("Job", "mnist-1"))
    with pytest.raises(AlreadyExists) as caught:
        kube.create(sample("Job", "mnist-1"))
    assert isinstance(caught.value, Conflict)
    assert caught.value.code == "kube_already_exists"
    assert caught.value.message.startswith("create Job team-a/mnist-1: ")


def test_a_409_on_apply_is_a_conflict_not_already_exists(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    kube_emulator.fail_next(
        "apply",
        409,
        reason="Conflict",
        message='Apply failed with 1 conflict: conflict with "kueue": .spec.suspend',
    )
    with pytest.raises(Conflict) as caught:
        kube.apply(sample("Job", "mnist-1"))
    assert not isinstance(caught.value, AlreadyExists)
    assert caught.value.message == (
        'apply Job team-a/mnist-1: Apply failed with 1 conflict: conflict with "kueue": '
        ".spec.suspend (HTTP 409)"
    )


def test_422_is_invalid_with_the_api_message_and_its_causes(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    message = (
        'Job.batch "mnist-1" is invalid: spec.template.spec.containers[0].image: Required value'
    )
    causes = [
        {
            "reason": "FieldValueRequired",
            "message": "Required value",
            "field": "spec.template.spec.containers[0].image",
        }
    ]
    kube_emulator.fail_next("create jobs", 422, reason="Invalid", message=message, causes=causes)
    with pytest.raises(Invalid) as caught:
        kube.create(sample("Job", "mnist-1"))
    err = caught.value
    assert err.message == f"create Job team-a/mnist-1: {message} (HTTP 422)"
    assert err.causes == [
        FieldCause("spec.template.spec.containers[0].image", "Required value", "FieldValueRequired")
    ]
    assert kube_emulator.objects("batch/v1", "Job") == []  # an injected failure stores nothing


def test_422_without_a_message_says_its_fields(kube: LightkubeClient, kube_emulator: KubeEmulator):
    causes = [{"field": "spec.queueName", "message": "Required value"}]
    kube_emulator.fail_next("create", 422, causes=causes, message=" ")
    with pytest.raises(Invalid, match=r"create Workload team-a/w: spec.queueName: Required value"):
        kube.create(sample("Workload", "w"))


@pytest.mark.parametrize("status", [401, 403])
def test_401_and_403_are_forbidden(status: int, kube: LightkubeClient, kube_emulator: KubeEmulator):
    kube_emulator.fail_next("list", status, message='jobs.batch is forbidden: User "x" cannot list')
    with pytest.raises(Forbidden, match=r"^list Job team-a/\*: jobs.batch is forbidden"):
        kube.list("batch/v1", "Job", "team-a")


def test_410_on_a_watch_is_gone(kube: LightkubeClient, kube_emulator: KubeEmulator):
    kube_emulator.fail_next("watch", 410, reason="Expired", message="too old resource version: 7")
    with pytest.raises(Gone, match="too old resource version: 7"):
        kube.watch("batch/v1", "Job", "team-a", resource_version="7")


def test_429_on_create_carries_retry_after(kube: LightkubeClient, kube_emulator: KubeEmulator):
    kube_emulator.fail_next("create", 429, retry_after=3)
    with pytest.raises(TooManyRequests) as caught:
        kube.create(sample("Job", "mnist-1"))
    assert caught.value.retry_after == 3.0


def test_a_secret_value_never_reaches_an_error_message(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    secret = sample("Secret", "hf")
    value = secret["data"]["token"]
    message = f'Secret "hf" is invalid: data[token]: Invalid value: "{value}": too long'
    causes = [{"field": "data[token]", "message": f'Invalid value: "{value}": too long'}]
    kube_emulator.fail_next("create secrets", 422, message=message, causes=causes)
    with pytest.raises(Invalid) as caught:
        kube.create(secret)
    assert value not in str(caught.value)
    assert value not in repr(caught.value.causes)
    assert "data[token]: Invalid value: <redacted>: too long" in caught.value.message


def test_connection_refused_is_unreachable_without_retrying_a_create(
    tmp_path, kube_emulator: KubeEmulator
):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    config.write_text(config.read_text().replace(kube_emulator.url, f"http://127.0.0.1:{port}"))
    sleeps = Sleeps()
    with LightkubeClient.from_kubeconfig(
        config, retry_budget_s=1.0, sleep=sleeps, jitter=lambda: 1.0
    ) as client:
        with pytest.raises(Unreachable) as caught:
            client.create(sample("Job", "mnist-1"))
        assert sleeps == []
        assert caught.value.message.startswith(
            f"create Job team-a/mnist-1: no answer from http://127.0.0.1:{port} (ConnectError"
        )
        with pytest.raises(Unreachable):
            client.get(JOB)
        # get is retried: 0.2, 0.4 (doubling) until the next would pass the 1 s budget
        assert sleeps == [0.2, 0.4]


def test_an_unexpected_status_is_a_plain_kube_error(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    kube_emulator.fail_next("get", 418, message="short and stout")
    with pytest.raises(KubeError) as caught:
        kube.get(JOB)
    assert type(caught.value) is KubeError
    assert caught.value.message == "get Job team-a/mnist-1: short and stout (HTTP 418)"


def test_a_5xx_names_the_answer(kube: LightkubeClient, kube_emulator: KubeEmulator):
    kube_emulator.fail_next("create", 500, message="etcdserver: request timed out")
    with pytest.raises(ServerError, match=r"etcdserver: request timed out \(HTTP 500\)$"):
        kube.create(sample("Job", "mnist-1"))
