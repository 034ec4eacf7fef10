"""Who may write a shared volume, by what it holds (#45): the rule as a truth table."""

from __future__ import annotations

import pytest

from virtdriver.errors import EXIT_CODES, SharedWriteRefused
from virtdriver.policy.filesystems import (
    UNDECIDED,
    Signature,
    check_writers,
    shared_write_harm,
    undecided,
    unshareable,
)

EXT4 = [Signature("ext4", "filesystem")]


@pytest.mark.parametrize(("signatures", "expected"), [
    ([], []),  # raw or unknown data
    (EXT4, ["ext4"]),
    ([Signature("xfs", "filesystem")], ["xfs"]),
    ([Signature("btrfs", "filesystem")], ["btrfs"]),
    ([Signature("vfat", "filesystem")], ["vfat"]),
    ([Signature("ntfs", "filesystem")], ["ntfs"]),
    ([Signature("gfs2", "filesystem")], []),  # cluster filesystems coordinate their writers
    ([Signature("ocfs2", "filesystem")], []),
    ([Signature("LVM2_member", "raid")], []),  # a cluster volume manager's business
    ([Signature("crypto_LUKS", "crypto")], []),
    ([Signature("swap", "other")], ["swap"]),  # two guests swapping overwrite each other
    ([Signature("vfat", "filesystem"), Signature("ext4", "filesystem"),
      Signature("ambivalent", UNDECIDED)], ["vfat", "ext4"]),  # every candidate counts
    ([Signature("dos", "partition table"), Signature("ext4", "filesystem", "partition 1")],
     ["ext4 (partition 1)"]),
    ([Signature("ext4", "filesystem", "partition 2"), Signature("gfs2", "filesystem",
                                                                 "partition 1")],
     ["ext4 (partition 2)"]),
])
def test_what_is_not_built_for_shared_block_access(signatures: list, expected: list) -> None:
    assert unshareable(signatures) == expected


def test_a_second_writer_of_ext4_is_refused_in_one_line_naming_the_override() -> None:
    with pytest.raises(SharedWriteRefused) as refused:
        check_writers("v1", ["ext4"], ["a", "b"], [], ["b"], allow_shared_write=False)
    message = str(refused.value)
    assert "\n" not in message and "ext4" in message and "a, b" in message
    assert "--allow-shared-write" in message
    assert refused.value.exit_code == EXIT_CODES["policy"] == 3


def test_the_override_lets_it_through_with_a_warning() -> None:
    said = check_writers("v1", ["ext4"], ["a", "b"], [], ["b"], allow_shared_write=True)
    assert said is not None and "--allow-shared-write" in said and "a, b" in said


@pytest.mark.parametrize(("writers", "readers", "joining"), [
    (["a"], ["b"], ["b"]),  # a reader joins a writer
    (["a"], ["b"], ["a"]),  # a writer joins a reader: the same outcome, whoever came first
    (["a"], ["b", "c"], ["b", "c"]),  # attach-many: one writer, readers
])
def test_a_reader_beside_one_writer_is_allowed_and_told_what_it_sees(
        writers: list, readers: list, joining: list) -> None:
    said = check_writers("v1", ["ext4"], writers, readers, joining, allow_shared_write=False)
    assert said is not None and "stale" in said and "\n" not in said
    assert all(r in said for r in readers) and writers[0] in said


@pytest.mark.parametrize(("filesystems", "writers", "readers", "joining"), [
    ([], ["a", "b"], [], ["b"]),  # raw, unknown, cluster, LVM: nothing to say
    (["ext4"], ["a"], [], ["a"]),  # one guest alone
    (["ext4"], [], ["a", "b"], ["b"]),  # readers only
    (["ext4"], ["a", "b"], [], []),  # nothing joins (audit's business, not attach's)
])
def test_nothing_to_say(filesystems: list, writers: list, readers: list, joining: list) -> None:
    assert check_writers("v1", filesystems, writers, readers, joining,
                         allow_shared_write=False) is None


@pytest.mark.parametrize("joining", [["c"], ["b"], ["a"]])
def test_a_reader_beside_two_writers_is_warned_never_refused(joining: list) -> None:
    """Whoever came first (the reader ``c`` last, or a writer last: refused on its own)."""
    if joining == ["c"]:
        said = check_writers("v1", ["ext4"], ["a", "b"], ["c"], joining,
                             allow_shared_write=False)
        assert said is not None and "c reads it while a, b write" in said
    else:
        with pytest.raises(SharedWriteRefused):
            check_writers("v1", ["ext4"], ["a", "b"], ["c"], joining, allow_shared_write=False)


def test_a_probe_that_cannot_decide_refuses_naming_why_and_the_override() -> None:
    why = undecided([Signature("blkid: timed out", UNDECIDED)])
    with pytest.raises(SharedWriteRefused) as refused:
        check_writers("v1", [], ["a", "b"], [], ["b"], allow_shared_write=False, unknown=why)
    message = str(refused.value)
    assert "could not be decided (blkid: timed out)" in message
    assert "--allow-shared-write" in message and "\n" not in message
    said = check_writers("v1", [], ["a", "b"], [], ["b"], allow_shared_write=True, unknown=why)
    assert said is not None and "--allow-shared-write" in said


def test_a_probe_that_decided_says_nothing_undecided() -> None:
    assert undecided([Signature("ext4", "filesystem")]) == ""


@pytest.mark.parametrize(("signatures", "said", "unsaid"), [
    ([], [], []),
    ([Signature("gfs2", "filesystem")], [], []),
    (EXT4, ["holds ext4, which is not a cluster filesystem", "journal"], ["swap", "decided"]),
    ([Signature("swap", "other")], ["swap area (swap)", "pages"], ["journal", "decided"]),
    ([Signature("ext4", "filesystem", "partition 1"), Signature("swap", "other", "partition 2")],
     ["ext4 (partition 1), which", "swap area (swap (partition 2))"], ["decided"]),
    ([Signature("/dev/loop9 could not be read: blkid: timed out", UNDECIDED)],
     ["could not be decided (/dev/loop9 could not be read: blkid: timed out)",
      "--allow-shared-write"], ["journal", "swap"]),
])
def test_audit_says_what_several_writers_do_to_what_the_volume_holds(
        signatures, said, unsaid) -> None:
    harm = shared_write_harm(signatures)
    assert all(words in harm for words in said), harm
    assert not any(words in harm for words in unsaid), harm
    assert bool(harm) == bool(said) and "\n" not in harm
