"""The model layout (atomic, increasing versions) and safe extraction of uploaded zips."""

from __future__ import annotations

import os
import shutil
import stat
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from serving import layout
from serving.archive import ArchiveError, extract_saved_model_zip


def saved_model(folder: Path, marker: str = "") -> Path:
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph" + marker.encode())
    (folder / "variables" / "variables.index").write_bytes(b"index")
    return folder


def test_publish_gives_increasing_versions(tmp_path: Path) -> None:
    source = saved_model(tmp_path / "export")
    base = tmp_path / "models"
    published = [
        layout.publish_version(source=source, model_base=base, model_name="m") for _ in range(3)
    ]
    assert [p.version for p in published] == [1, 2, 3]
    model = layout.model_path(model_base=base, model_name="m")
    assert layout.list_versions(model_path=model) == [1, 2, 3]
    assert (published[2].path / "variables" / "variables.index").read_bytes() == b"index"
    # Nothing but version folders is left behind: the staging copy was renamed into place.
    assert sorted(p.name for p in model.iterdir()) == ["1", "2", "3"]


def test_publish_continues_after_zero_padded_versions(tmp_path: Path) -> None:
    base = tmp_path / "models"
    saved_model(base / "m" / "00000123")
    (base / "m" / "notes").mkdir()
    assert layout.list_versions(model_path=base / "m") == [123]
    assert layout.version_path(model_path=base / "m", version=123) == base / "m" / "00000123"
    version = layout.publish_version(
        source=saved_model(tmp_path / "export"), model_base=base, model_name="m"
    )
    assert version.version == 124
    with pytest.raises(FileNotFoundError):
        layout.version_path(model_path=base / "m", version=7)


def test_concurrent_publishers_never_share_a_version(tmp_path: Path) -> None:
    base = tmp_path / "models"
    sources = [saved_model(tmp_path / f"export{i}", marker=str(i)) for i in range(8)]
    barrier = threading.Barrier(len(sources))
    results: dict[int, int] = {}

    def publish(index: int) -> None:
        barrier.wait()
        published = layout.publish_version(source=sources[index], model_base=base, model_name="m")
        results[index] = published.version

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(len(sources))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results.values()) == list(range(1, 9))
    for index, version in results.items():
        content = (base / "m" / str(version) / "saved_model.pb").read_bytes()
        assert content == b"graph" + str(index).encode()


def test_publish_rejects_bad_sources_and_names(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"saved_model\.pb"):
        layout.publish_version(source=tmp_path / "empty", model_base=tmp_path, model_name="m")
    for name in ("../escape", "a/b", "", ".hidden"):
        with pytest.raises(ValueError, match="invalid model name"):
            layout.model_path(model_base=tmp_path, model_name=name)


def test_untrusted_publish_copies_files_and_directories_as_they_are(tmp_path: Path) -> None:
    source = saved_model(tmp_path / "export")
    (source / "assets").mkdir()
    (source / "assets" / "vocab.txt").write_bytes(b"a\nb\n")
    (source / "assets" / "vocab.txt").chmod(0o640)
    published = layout.publish_version(
        source=source, model_base=tmp_path / "models", model_name="m", untrusted=True
    )
    copied = sorted(str(p.relative_to(published.path)) for p in published.path.rglob("*"))
    assert copied == sorted(str(p.relative_to(source)) for p in source.rglob("*"))
    assert (published.path / "assets" / "vocab.txt").read_bytes() == b"a\nb\n"
    assert stat.S_IMODE((published.path / "assets" / "vocab.txt").stat().st_mode) == 0o640
    assert (published.path / "saved_model.pb").stat().st_mtime_ns == (
        source / "saved_model.pb"
    ).stat().st_mtime_ns


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (lambda s: (s / "variables" / "evil").symlink_to("/etc/passwd"), "variables/evil is a sym"),
        (lambda s: (s / "variables" / "up").symlink_to(".."), "variables/up is a symbolic link"),
        (lambda s: (s / "broken").symlink_to(s / "nowhere"), "broken is a symbolic link"),
        (lambda s: os.mkfifo(s / "variables" / "pipe"), "variables/pipe is a fifo"),
        (lambda s: os.mknod(s / "sock", stat.S_IFSOCK | 0o600), "sock is a socket"),
    ],
)
def test_untrusted_publish_refuses_links_and_special_files_anywhere(
    tmp_path: Path, plant: Callable[[Path], object], message: str
) -> None:
    source = saved_model(tmp_path / "export")
    plant(source)
    with pytest.raises(layout.UnsafeSource, match=message):
        layout.plain_tree_check(root=source)
    with pytest.raises(layout.UnsafeSource, match=message):
        layout.publish_version(
            source=source, model_base=tmp_path / "models", model_name="m", untrusted=True
        )
    assert list((tmp_path / "models").glob("m/*")) == []  # not even a staging folder remains


def test_untrusted_source_that_is_a_link_is_refused(tmp_path: Path) -> None:
    real = saved_model(tmp_path / "real")
    (tmp_path / "export").symlink_to(real)
    with pytest.raises(layout.UnsafeSource, match="source directory is a symbolic link"):
        layout.publish_version(
            source=tmp_path / "export",
            model_base=tmp_path / "models",
            model_name="m",
            untrusted=True,
        )
    # A trusted source (a staff member's path) is still copied as before, links followed.
    published = layout.publish_version(
        source=tmp_path / "export", model_base=tmp_path / "models", model_name="m"
    )
    assert (published.path / "saved_model.pb").read_bytes() == b"graph"


def test_a_link_swapped_in_after_the_check_is_refused_not_followed(tmp_path: Path) -> None:
    source = saved_model(tmp_path / "export")
    layout.plain_tree_check(root=source)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "variables.index").write_bytes(b"someone else's")
    shutil.rmtree(source / "variables")
    (source / "variables").symlink_to(secret)
    destination = tmp_path / "copy"
    destination.mkdir()
    with pytest.raises(layout.UnsafeSource, match="variables is a symbolic link"):
        layout.plain_tree_copy(source=source, destination=destination)
    assert not (destination / "variables").exists()


def test_an_untrusted_tree_nested_too_deep_is_refused(tmp_path: Path) -> None:
    source = saved_model(tmp_path / "export")
    (source / Path(*["d"] * 40)).mkdir(parents=True)
    with pytest.raises(layout.UnsafeSource, match="nested more than"):
        layout.plain_tree_check(root=source)


def make_zip(path: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, data in entries.items():
            bundle.writestr(name, data)
    return path


def test_extracts_a_model_at_the_root_or_in_one_folder(tmp_path: Path) -> None:
    flat = make_zip(
        tmp_path / "flat.zip",
        {"saved_model.pb": b"pb", "variables/variables.index": b"ix"},
    )
    root = extract_saved_model_zip(archive=flat, destination=tmp_path / "flat")
    assert root == tmp_path / "flat"
    assert (root / "variables" / "variables.index").read_bytes() == b"ix"
    nested = make_zip(
        tmp_path / "nested.zip",
        {"my_model/saved_model.pb": b"pb", "my_model/assets/vocab.txt": b"a"},
    )
    root = extract_saved_model_zip(archive=nested, destination=tmp_path / "nested")
    assert root == tmp_path / "nested" / "my_model"
    assert (root / "saved_model.pb").read_bytes() == b"pb"


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"/etc/saved_model.pb": b"x"}, "absolute path"),
        ({"saved_model.pb": b"x", "../evil": b"x"}, r"'\.\.' in archive path"),
        ({"saved_model.pb": b"x", "variables/../../evil": b"x"}, r"'\.\.' in archive path"),
        ({"saved_model.pb": b"x", "C:/windows": b"x"}, "absolute path"),
        ({"variables/variables.index": b"x"}, r"saved_model\.pb"),
        ({"a/saved_model.pb": b"x", "b/other": b"x"}, "single top-level folder"),
        ({"a/b/saved_model.pb": b"x"}, "single top-level folder"),
    ],
)
def test_unsafe_or_modelless_archives_are_rejected(
    tmp_path: Path, entries: dict[str, bytes], message: str
) -> None:
    bundle = make_zip(tmp_path / "bad.zip", entries)
    with pytest.raises(ArchiveError, match=message):
        extract_saved_model_zip(archive=bundle, destination=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "evil").exists()


def test_symlinks_are_rejected(tmp_path: Path) -> None:
    bundle = tmp_path / "link.zip"
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.writestr("saved_model.pb", b"x")
        link = zipfile.ZipInfo("variables")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc")
    with pytest.raises(ArchiveError, match="symlink in archive: variables"):
        extract_saved_model_zip(archive=bundle, destination=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_size_and_count_caps(tmp_path: Path) -> None:
    big = make_zip(tmp_path / "big.zip", {"saved_model.pb": b"\0" * 10_000})
    with pytest.raises(ArchiveError, match="expands beyond 1000 bytes"):
        extract_saved_model_zip(archive=big, destination=tmp_path / "a", max_bytes=1000)
    many = make_zip(
        tmp_path / "many.zip", {f"f{i}": b"" for i in range(5)} | {"saved_model.pb": b""}
    )
    with pytest.raises(ArchiveError, match="more than 3"):
        extract_saved_model_zip(archive=many, destination=tmp_path / "b", max_files=3)
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(ArchiveError, match="not a readable zip"):
        extract_saved_model_zip(archive=tmp_path / "junk.zip", destination=tmp_path / "c")
