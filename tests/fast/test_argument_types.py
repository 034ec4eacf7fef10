"""Every public entry point answers an argument of the wrong type with a typed error (#25).

For each argument of ``build_disk``, of every ``LibvirtVolumeDriver`` method, of ``HostOptions``,
of the XML model's readers and of the CLI's ``main``, a value of another type (lists, dicts,
bytes, numbers, None where none is allowed, strings where a list is expected, ...) is put in
while the other arguments stay valid: the answer is an :class:`~virtdriver.errors.InputError`
subclass whose one-line message names the argument -- never a raw ``TypeError`` or
``AttributeError``, and never before-the-check I/O (the driver points at ``test:///default``, whose
guests and volumes are not ours: a check that came after any lookup would fail here).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from virtdriver import build_disk
from virtdriver.cli import main
from virtdriver.config import Disk, DomainDisks
from virtdriver.driver import HostOptions, LibvirtVolumeDriver
from virtdriver.errors import InputError

VID = "0b4e3c52-7b3f-4c2c-9e6b-3f6a1d2e4c5f"
INFO = {"driver_volume_type": "local", "serial": VID, "multiattach": True,
        "data": {"volume_id": VID, "device_path": "/dev/vd-no-such-device"}}
SETTINGS = settings(max_examples=25, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])


# What each argument accepts (a predicate on the type), so that the generated values are exactly
# the ones of another type.
def text(v: object) -> bool:
    return isinstance(v, str)


def opt(pred: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda v: v is None or pred(v)


def flag(v: object) -> bool:
    return isinstance(v, bool)


def integer(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def number(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def mapping(v: object) -> bool:
    return isinstance(v, Mapping)


def texts(v: object) -> bool:
    return isinstance(v, Sequence) and not isinstance(v, (str, bytes)) and all(
        isinstance(x, str) for x in v)


def mappings(v: object) -> bool:
    return isinstance(v, Sequence) and not isinstance(v, (str, bytes)) and all(
        isinstance(x, Mapping) for x in v)


def path(v: object) -> bool:
    return isinstance(v, (str, Path))


def mode_or_modes(v: object) -> bool:
    return v is None or isinstance(v, (str, Mapping))


def xml_text(v: object) -> bool:
    return isinstance(v, (str, bytes, bytearray))


ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=4),
    st.binary(max_size=4), st.lists(st.text(max_size=3), max_size=2),
    st.lists(st.integers(), min_size=1, max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    st.tuples(st.integers()), st.frozensets(st.integers(), max_size=2),
    st.just(object()), st.just(Path("/tmp")), st.just([{"a": 1}]), st.just(b"<disk/>"),
    st.builds(bytearray, st.binary(max_size=3)), st.just(3 + 4j))


# ---- the entry points: (call, the valid arguments, what each accepts) ---------------------------

BUILD_DISK = (lambda **kw: build_disk(**kw).to_xml(), {
    "connection_info": (INFO, mapping), "attach_mode": ("ro", opt(text)),
    "target_dev": ("sdb", text), "bus": ("scsi", text), "device": ("disk", text),
    "scsi_unit": (1, opt(integer)),
    "luks_secret_uuid": (None, opt(text)), "mount_base": ("/mnt/v", opt(text)),
    "label_policy": ("auto", text), "shared_image_label": (None, opt(text)),
    "native_iscsi": (False, flag), "native_glusterfs": (False, flag),
    "initiator_iqn": (None, opt(text)), "alias": (None, opt(text)),
    "security_models": (None, opt(texts))})

HOST_OPTIONS = (lambda **kw: HostOptions(**kw), {
    "state_dir": ("/tmp/vd-types", path), "mount_base": (None, opt(path)),
    "label_policy": ("auto", text), "shared_image_label": (None, opt(text)),
    "detach_timeout": (30.0, number), "lock_timeout": (5.0, number),
    "lock_notice_after": (2.0, number), "native_iscsi": (False, flag),
    "native_glusterfs": (False, flag), "use_multipath": (False, flag),
    "enforce_multipath": (False, flag), "initiator_iqn": (None, opt(text))})

DRIVER_ARGS = {
    "__init__": {"uri": ("test:///default", text), "state_dir": ("/tmp/vd-types", path),
                 "options": (None, opt(lambda v: isinstance(v, HostOptions)))},
    "list_attachments": {"instance": ("no-such-guest", text)},
    "volume_users": {"volume": (VID, text)},
    "connector_properties": {"attach_mode": ("ro", text), "my_ip": ("127.0.0.1", text),
                             "multipath": (None, opt(flag))},
    "attach_volume": {"connection_info": (INFO, mapping), "instance": ("no-such-guest", text),
                      "attach_mode": ("ro", opt(text)), "target_dev": (None, opt(text)),
                      "bus": (None, opt(text)), "device": ("disk", text),
                      "luks_secret_uuid": (None, opt(text))},
    "attach_volume_to_many": {"connection_info": (INFO, mapping),
                              "instances": (["no-such-guest"], texts),
                              "attach_mode": ("ro", mode_or_modes),
                              "progress": (None, opt(callable)),
                              "max_parallel": (4, integer)},
    "detach_volume": {"instance": ("no-such-guest", text), "volume_id": (VID, text),
                      "timeout": (None, opt(number)), "connection_info": (None, opt(mapping))},
    "release_volume": {"volume_id": (VID, text)},
    "swap_volume": {"instance": ("no-such-guest", text), "old_connection_info": (INFO, mapping),
                    "new_connection_info": (INFO, mapping), "timeout": (None, opt(number))},
    "extend_volume": {"instance": ("no-such-guest", text), "connection_info": (INFO, mapping),
                      "new_size": (1 << 30, integer)},
    "prepare_incoming": {"connection_info": (INFO, mapping), "instance": ("no-such-guest", text),
                         "attach_mode": ("ro", opt(text))},
    "incoming_xml": {"domain_xml": ("<domain><name>g</name></domain>", xml_text),
                     "connection_infos": ([INFO], mappings)},
    "abort_incoming": {"instance": ("no-such-guest", text), "volume_id": (VID, text)},
    "finish_outgoing": {"instance": ("no-such-guest", text), "volume_id": (VID, text)},
    "migrate": {"instance": ("no-such-guest", text),
                "destination": ("DRIVER", lambda v: isinstance(v, LibvirtVolumeDriver)),
                "connection_infos": ([INFO], mappings), "uri": (None, opt(text))},
}

READERS = {
    "Disk.from_xml": (lambda **kw: Disk.from_xml(**kw), {
        "text": ("<disk type='file'/>", xml_text), "strict": (True, flag)}),
    "DomainDisks.from_xml": (lambda **kw: DomainDisks.from_xml(**kw), {
        "text": ("<domain/>", xml_text)}),
}


def assert_typed_and_named(call: Callable[..., Any], kwargs: dict[str, Any], field: str) -> None:
    try:
        call(**kwargs)
    except InputError as exc:
        message = str(exc)
        assert message and "\n" not in message
        assert field in message, (field, message)
        return
    pytest.fail(f"{field}={kwargs[field]!r} was accepted")


def cases() -> list[tuple[str, str]]:
    found = ([("build_disk", p) for p in BUILD_DISK[1]]
             + [("HostOptions", p) for p in HOST_OPTIONS[1]])
    found += [(f"LibvirtVolumeDriver.{m}", p) for m, params in DRIVER_ARGS.items() for p in params]
    found += [(name, p) for name, (_, params) in READERS.items() for p in params]
    return found


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> LibvirtVolumeDriver:
    made = LibvirtVolumeDriver("test:///default", state_dir=tmp_path_factory.mktemp("state"))
    yield made
    made.close()


@pytest.mark.parametrize("entry, field", cases())
@SETTINGS
@given(data=st.data())
def test_a_wrong_type_is_an_input_error_naming_the_argument(entry: str, field: str, data,
                                                           driver, tmp_path_factory) -> None:
    if entry == "build_disk":
        call, params = BUILD_DISK
    elif entry == "HostOptions":
        call, params = HOST_OPTIONS
    elif entry in READERS:
        call, params = READERS[entry]
    else:
        method = entry.split(".", 1)[1]
        params = DRIVER_ARGS[method]
        call = LibvirtVolumeDriver if method == "__init__" else getattr(driver, method)
    kwargs = {k: (driver if v == "DRIVER" else v) for k, (v, _) in params.items()}
    accepts = params[field][1]
    kwargs[field] = data.draw(ANY_VALUE.filter(lambda v: not accepts(v)), label=field)
    assert_typed_and_named(call, kwargs, field)


@pytest.mark.parametrize("argv", [[1], ["render", b"x"], "render -", [None], (["render"],), 5,
                                  {"render": "-"}, b"render"])
def test_the_cli_answers_arguments_that_are_not_strings(argv: Any, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("virtdriver: error: ") and len(err.splitlines()) == 1, err


def test_the_valid_arguments_of_the_table_are_valid(driver) -> None:
    """The table's own valid values pass the type checks (so each case tests one argument)."""
    build_disk(**{k: v for k, (v, _) in BUILD_DISK[1].items()})
    HostOptions(**{k: v for k, (v, _) in HOST_OPTIONS[1].items()})


def test_an_unknown_host_option_is_named() -> None:
    with pytest.raises(InputError, match="^lock_timout: not a host option"):
        LibvirtVolumeDriver("test:///default", lock_timout=3)
