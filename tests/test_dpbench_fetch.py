"""dpx.datasets.fetch_dpbench: a checksummed, once-only download of the DPBench histograms.

The machine running the suite has no internet: the download path is tested against a local
HTTP server serving a temporary copy of the real files (copied at test time from the shared
folder, never into the repository), so the checksums checked are the real ones.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from dpexplorer import datasets as ds

DPBENCH = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "dpbench").resolve()

SOME = ("HEPTH", "ADULT-2D")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _Server:
    """A local HTTP server over a folder, counting the requests it answers."""

    def __init__(self, root: Path):
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                outer.requests.append(self.path)
                super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def mirror(tmp_path, dpbench_dir):
    """A local mirror of the DPBench files (real bytes, copied at test time)."""
    root = tmp_path / "mirror"
    for f in ds.DPBENCH_FILES:
        if f.paper_name in SOME:
            (root / f.path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(dpbench_dir / f.path, root / f.path)
    server = _Server(root)
    yield root, server
    server.close()


def test_the_registry_checksums_are_those_of_the_files(dpbench_dir):
    on_disk = {p.relative_to(dpbench_dir).as_posix() for p in dpbench_dir.glob("[12]D/*.npy")}
    assert on_disk == {f.path for f in ds.DPBENCH_FILES}
    for f in ds.DPBENCH_FILES:
        assert _sha256(dpbench_dir / f.path) == f.sha256, f.path
        assert f.source and f.description and f.paper_name
    assert ds.DPBENCH_BASE_URL.startswith("https://") and "233cfcc3" in ds.DPBENCH_BASE_URL


def test_fetch_downloads_once_with_checksums(mirror, tmp_path, dpbench_dir):
    root, server = mirror
    cache = tmp_path / "cache"
    got = ds.fetch_dpbench(cache, names=SOME, base_url=server.url)
    assert got == cache
    assert sorted(server.requests) == ["/1D/HEPTH.n4096.npy", "/2D/Adult_2D_256_256.npy"]
    for name in SOME:
        f = ds._dpbench_file(name)
        assert _sha256(cache / f.path) == f.sha256
    x = ds.load_dpbench("HEPTH", cache)
    np.testing.assert_array_equal(x, ds.load_dpbench("HEPTH", dpbench_dir))
    listing = ds.list_dpbench(cache)
    assert set(listing["paper_name"]) == {"HEPTH", "Adult_2D_256_256"}
    assert listing["source"].str.contains("DPBench").all()
    # a second call finds every file with its checksum: no request at all
    server.requests.clear()
    ds.fetch_dpbench(cache, names=SOME, base_url=server.url)
    assert server.requests == []


def test_a_corrupted_download_is_refused_and_not_kept(mirror, tmp_path):
    root, server = mirror
    f = ds._dpbench_file("HEPTH")
    data = bytearray((root / f.path).read_bytes())
    data[-1] ^= 0xFF                                       # one bit flipped in the last count
    (root / f.path).write_bytes(bytes(data))
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match="(?i)hash"):
        ds.fetch_dpbench(cache, names=["HEPTH"], base_url=server.url)
    assert not (cache / f.path).exists()


def test_a_tampered_local_file_is_downloaded_again(mirror, tmp_path):
    root, server = mirror
    cache = tmp_path / "cache"
    ds.fetch_dpbench(cache, names=["HEPTH"], base_url=server.url)
    f = ds._dpbench_file("HEPTH")
    (cache / f.path).write_bytes(b"not a histogram")
    server.requests.clear()
    ds.fetch_dpbench(cache, names=["HEPTH"], base_url=server.url)
    assert server.requests == ["/1D/HEPTH.n4096.npy"] and _sha256(cache / f.path) == f.sha256


def test_a_custom_downloader_is_used(tmp_path, dpbench_dir):
    """pooch's downloader hook: here a copy from a local folder (e.g. a USB stick)."""
    seen = []

    def from_folder(url, output_file, pooch_):
        rel = url.split("datafiles/", 1)[1]
        seen.append(rel)
        shutil.copyfile(dpbench_dir / rel, output_file)

    cache = tmp_path / "cache"
    ds.fetch_dpbench(cache, names=["NETTRACE"], downloader=from_folder)
    assert seen == ["1D/NETTRACE.n4096.npy"]
    assert ds.load_dpbench("NETTRACE", cache).shape == (4096,)


def test_no_network_fails_loudly(tmp_path):
    with pytest.raises(Exception) as info:   # requests' ConnectionError (an OSError)
        ds.fetch_dpbench(tmp_path / "cache", names=["HEPTH"], base_url="http://127.0.0.1:9/")
    assert "Connection" in type(info.value).__name__ or isinstance(info.value, OSError)
    assert not list((tmp_path / "cache").glob("*/*.npy"))


def test_unknown_name_lists_the_datasets(tmp_path):
    with pytest.raises(ds.UnknownDatasetError, match="NOPE.*available.*NETTRACE"):
        ds.fetch_dpbench(tmp_path, names=["NOPE"])


def test_the_folder_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("DPEXPLORER_DPBENCH", str(tmp_path / "mine"))
    assert ds.dpbench_cache_dir() == tmp_path / "mine"
    assert ds.default_dpbench_dir() == tmp_path / "mine"
    monkeypatch.delenv("DPEXPLORER_DPBENCH")
    import pooch

    monkeypatch.setattr(pooch, "os_cache", lambda project: tmp_path / "oscache" / project)
    assert ds.dpbench_cache_dir() == tmp_path / "oscache" / "dpexplorer" / "dpbench"
    # without a development copy, the download cache is the default once it holds files
    monkeypatch.setattr(ds, "_checkout_dpbench", lambda: tmp_path / "absent")
    assert ds.default_dpbench_dir() is None
    target = ds.dpbench_cache_dir() / "1D" / "x.npy"
    target.parent.mkdir(parents=True)
    np.save(target, np.ones(4))
    assert ds.default_dpbench_dir() == ds.dpbench_cache_dir()
    with pytest.raises(FileNotFoundError, match="fetch_dpbench"):
        ds.list_dpbench(tmp_path / "absent")


def test_the_shared_copy_is_read_through_fetch_offline():
    if not DPBENCH.is_dir():
        pytest.skip("DPBench data not found")
    # every file present with its checksum: nothing to download, even from an unreachable URL
    assert ds.fetch_dpbench(DPBENCH, base_url="http://127.0.0.1:9/") == DPBENCH


def test_every_dataset_says_where_it_comes_from():
    listing = ds.list_bundled()
    assert list(listing["name"]) == list(ds.bundled())
    assert listing["source"].str.contains("bokeh-sampledata").all()
    for name in ds.bundled():
        assert ds.load_bundled(name).source == ds.BUNDLED_SOURCES[name]
