"""The gitignore subset used by code snapshots."""

from __future__ import annotations

import pytest

from taugrid.workdir.ignore import compile_pattern, is_ignored, parse_patterns


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "expected"),
    [
        # plain names match at any depth, files and dirs
        ("foo", "foo", False, True),
        ("foo", "a/b/foo", True, True),
        ("foo", "foobar", False, False),
        # * and ? never cross a slash
        ("*.log", "x.log", False, True),
        ("*.log", "deep/dir/x.log", False, True),
        ("*.log", "x.log.txt", False, False),
        ("a/*.py", "a/b/c.py", False, False),
        ("?.txt", "a.txt", False, True),
        ("?.txt", "ab.txt", False, False),
        # trailing slash: directories only
        ("build/", "build", True, True),
        ("build/", "build", False, False),
        ("build/", "src/build", True, True),
        # leading or middle slash anchors to the ignore file's directory
        ("/root.txt", "root.txt", False, True),
        ("/root.txt", "sub/root.txt", False, False),
        ("doc/frotz", "doc/frotz", False, True),
        ("doc/frotz", "a/doc/frotz", False, False),
        # ** forms
        ("**/foo", "foo", False, True),
        ("**/foo", "a/b/foo", False, True),
        ("**/foo/bar", "x/foo/bar", False, True),
        ("abc/**", "abc/x/y", False, True),
        ("abc/**", "abc", True, False),
        ("a/**/b", "a/b", False, True),
        ("a/**/b", "a/x/y/b", False, True),
        ("a/**/b", "ax/b", False, False),
        ("a**b", "axxb", False, True),
        ("a**b", "a/b", False, False),
        # character classes
        ("[abc].txt", "b.txt", False, True),
        ("[!abc].txt", "b.txt", False, False),
        ("[!abc].txt", "d.txt", False, True),
        ("[a-c]x", "bx", False, True),
        ("[", "[", False, True),
        # escapes
        ("\\#hash", "#hash", False, True),
        ("\\!bang", "!bang", False, True),
        ("\\*", "*", False, True),
        ("\\*", "x", False, False),
        ("trail\\ ", "trail ", False, True),
        ("trail   ", "trail", False, True),
    ],
)
def test_pattern_matching(pattern: str, path: str, is_dir: bool, expected: bool) -> None:
    compiled = compile_pattern(pattern)
    assert compiled is not None
    assert compiled.matches(path, is_dir) is expected


@pytest.mark.parametrize("line", ["", "   ", "# comment", "/", "!", "\n"])
def test_lines_without_a_pattern(line: str) -> None:
    assert compile_pattern(line) is None


def test_negation_last_match_wins() -> None:
    rules = parse_patterns(["*.log", "!keep.log", "keep.log.d/"])
    assert is_ignored(rules, "x.log", False)
    assert not is_ignored(rules, "keep.log", False)
    assert not is_ignored(rules, "sub/keep.log", False)
    rules = parse_patterns(["!keep.log", "*.log"])
    assert is_ignored(rules, "keep.log", False)


def test_base_directory_scopes_patterns() -> None:
    rules = parse_patterns(["*.tmp", "/local.txt"], base="sub")
    assert is_ignored(rules, "sub/a.tmp", False)
    assert is_ignored(rules, "sub/deep/a.tmp", False)
    assert not is_ignored(rules, "a.tmp", False)
    assert not is_ignored(rules, "subx/a.tmp", False)
    assert is_ignored(rules, "sub/local.txt", False)
    assert not is_ignored(rules, "sub/deep/local.txt", False)


def test_crlf_lines() -> None:
    rules = parse_patterns(["*.bin\r\n", "# c\r\n"])
    assert len(rules) == 1
    assert is_ignored(rules, "a.bin", False)


def test_prefix_serves_ignore_files_above_the_root() -> None:
    # A .gitignore one level above a workdir named "proj".
    rules = parse_patterns(["/proj/data/", "/top.txt", "*.tmp"], prefix="proj/")
    assert is_ignored(rules, "data", True)
    assert not is_ignored(rules, "sub/data", True)
    assert not is_ignored(rules, "top.txt", False)
    assert is_ignored(rules, "deep/x.tmp", False)
