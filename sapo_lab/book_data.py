"""The committed data a chapter reads, fetched once into a local cache when the chapter runs alone.

Inside a checkout (a ``results/`` folder beside ``experiments/`` above the working directory)
nothing is fetched: the chapter reads the repository. Elsewhere (Colab, a notebook copied into
an empty folder) :func:`chapter_data` fetches exactly the files the chapter reads into
``cache_root()`` and checks each against ``book_data.sha256``, the repository's manifest of
SHA-256 digests, whose own digest :data:`MANIFEST_SHA256` this module pins (both written by
``tools/book_data_manifest.py``, the digest into the generated ``sapo_lab/_book_data_digest.py``, so
that committing results leaves this module alone; a test keeps them current). Data from another version of the
repository therefore fails the check instead of being read by code it does not fit.

The source is :data:`REPOSITORY` (``_config.yml``'s ``repository.url``, tested to agree), or the
environment variable ``SAPO_LAB_REPOSITORY``: a URL, a local path or a ``file://`` URL. The files
come by ``git``: a shallow clone without file contents (the commit and its trees, a few hundred
kB), then one fetch per batch of the wanted files' blobs, so that a chapter downloads what it
reads and a progress bar can follow the bytes. Of sapo_lab this module imports only the file digest
of :mod:`sapo_lab.runs.manifest` (the standard library alone), so it loads before torch or pydantic
are installed and ``results_root()`` can ask it where the cache is.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ._book_data_digest import MANIFEST_SHA256
from .runs.manifest import sha256_of

REPOSITORY = "https://github.com/sapo-lab/sapo-lab"
BRANCH = "main"
MANIFEST = "book_data.sha256"
ENV_SOURCE = "SAPO_LAB_REPOSITORY"
ENV_CACHE = "SAPO_LAB_CACHE"
# A study's files except the per-step metrics: what load_study, provenance and the primary tests read.
METADATA = ("study.json", "summary.json", "summary.csv", "environment.json", "kernel_fingerprint.json",
            "runs/*/study_record.json", "runs/*/config.json")
BATCH_BYTES = 8 << 20    # one fetch per ~8 MB of blobs: a progress step without a round trip per file


def _study(name: str) -> tuple[str, ...]:
    return (f"results/{name}/*",)


def _metadata(name: str) -> tuple[str, ...]:
    return tuple(f"results/{name}/{pattern}" for pattern in METADATA)


_EVIDENCE = ("main_comparison", "staleness", "staleness_long", "negative_tokens", "cost_of_conservatism",
             "equal_search_budget", "suite_mix")
_CONFIRMATORY = ("confirm_addition", "confirm_scratchpad")

# chapter (notebook stem) -> the paths it reads, as fnmatch patterns over the manifest ("*" crosses "/").
# experiments/ comes with every chapter: results_root() recognises a data root by it.
CHAPTERS: dict[str, tuple[str, ...]] = {
    "01_reading_map": tuple(p for name in (*_CONFIRMATORY, "gate_map") for p in _metadata(name)),
    "10c_conformance_audit": ("results/conformance/matrix.json",
                              "results/conformance/settings_reach.json"),
    "11a_training_the_gpt2": _study("main_comparison"),
    "12_reading_the_evidence": tuple(p for name in _EVIDENCE for p in _study(name)),
    "13_limitations_reproducibility": (*_study("main_comparison"), *_study("cost_of_conservatism"),
                                       *(p for name in _CONFIRMATORY for p in _study(name)),
                                       *_metadata("*"), "tests/studies/test_results_reproduce.py",
                                       "results/gate_map/runs/sapo_tau_x8.81_lr2e-4_M8_seed26/*",
                                       "results/replications/*/replication.json",
                                       "results/replications/*/runs/*/study_record.json"),
    "14_critical_analysis": tuple(p for name in _EVIDENCE for p in _study(name)),
    "14b_instability_and_tuning": tuple(p for name in _EVIDENCE for p in _study(name)),
    "15_follow_up_experiment": tuple(p for name in ("main_comparison", "staleness", "staleness_long",
                                                    "equal_search_budget") for p in _study(name)),
    "15b_gate_map": (*(p for name in ("gate_map", *_CONFIRMATORY) for p in _metadata(name)),
                     "results/gate_map/runs/*/study_wall.json"),  # the provenance's resumed runs
    "16_conclusion": (*(p for name in (*_EVIDENCE, *_CONFIRMATORY) for p in _study(name)), *_metadata("gate_map"),
                      "results/replications/*/replication.json", "results/replications/*/environment.json",
                      "results/kernel_fingerprints.json"),
    "appendix_provenance": tuple(p for name in (*_EVIDENCE, *_CONFIRMATORY) for p in _metadata(name)),
}
ALWAYS = ("experiments/*",)


class BookDataError(RuntimeError):
    """The chapter's data could not be fetched or failed its check; the message is one line."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [f"{type(self).__name__}: {self}"]


def repository_root(start: str | os.PathLike | None = None) -> Path | None:
    """The checkout above ``start`` (default: cwd): the first folder holding results/ and experiments/."""
    here = Path(start or os.getcwd()).resolve()
    for p in (here, *here.parents):
        if (p / "results").is_dir() and (p / "experiments").is_dir():
            return p
    return None


def cache_root() -> Path:
    """Where fetched data lives: ``$SAPO_LAB_CACHE``, else the user's cache folder; one subfolder per manifest."""
    base = os.environ.get(ENV_CACHE) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sapo_lab"
    return Path(base) / MANIFEST_SHA256[:12]


def source() -> tuple[str, str | None]:
    """The git URL to fetch from and the branch (None: the source's default branch)."""
    given = os.environ.get(ENV_SOURCE, "").strip()
    if not given:
        return REPOSITORY, BRANCH
    if "://" in given or given.startswith("git@"):
        return given, None
    # a plain path: git's file:// transport, which (unlike a local clone) honours --depth and --filter
    return Path(given).expanduser().resolve().as_uri(), None


def parse_manifest(text: str) -> dict[str, tuple[str, int]]:
    """``path -> (sha256, size)`` from the manifest's ``SHA256 SIZE PATH`` lines (``#`` lines are comments)."""
    entries = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            digest, size, path = line.split(" ", 2)
            entries[path] = (digest, int(size))
    return entries


def select(manifest: dict[str, tuple[str, int]], patterns) -> list[str]:
    """The manifest's paths that match any pattern, sorted."""
    return sorted(p for p in manifest if any(fnmatch.fnmatchcase(p, pat) for pat in patterns))


def _megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def chapter_data(chapter: str, *, out=None) -> Path:
    """The folder holding the ``results/`` and ``experiments/`` that ``chapter`` reads.

    In a checkout: the checkout, untouched. Elsewhere: :func:`cache_root`, after fetching the
    chapter's files that are not already there with their manifest digest. Says what it fetches,
    from where and how large, and raises :class:`BookDataError` (one line naming the source) when
    the source cannot be read or a file fails its check.
    """
    if chapter not in CHAPTERS:
        raise BookDataError(f"no data declared for chapter {chapter!r}; known: {', '.join(CHAPTERS)}")
    root = repository_root()
    if root is not None:
        return root
    out = out or sys.stdout
    cache = cache_root()
    manifest_path = cache / MANIFEST
    manifest = None
    if manifest_path.is_file() and sha256_of(manifest_path) == MANIFEST_SHA256:
        manifest = parse_manifest(manifest_path.read_text())
        wanted = select(manifest, CHAPTERS[chapter] + ALWAYS)
        missing = [p for p in wanted if not _verified(cache / p, manifest[p])]
        if not missing:
            size = sum(manifest[p][1] for p in wanted)
            print(f"{chapter}: {len(wanted)} files ({_megabytes(size)}) already in {cache}, SHA-256 verified",
                  file=out)
            return cache
    _fetch(chapter, cache, manifest, out)
    return cache


def _verified(path: Path, entry: tuple[str, int]) -> bool:
    return path.is_file() and path.stat().st_size == entry[1] and sha256_of(path) == entry[0]


def _git(args: list[str], cwd: Path, url: str, stdin: str | None = None) -> str:
    if shutil.which("git") is None:
        raise BookDataError(f"git is needed to fetch the book's data from {url} and is not installed")
    done = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"git exited with status {done.returncode}"])[-1]
        raise BookDataError(f"cannot fetch the book's data from {url}: {last.removeprefix('fatal: ')}")
    return done.stdout


# For a local source (file://) git serves itself: allow filters and wants by id, and skip the delta search
# (pack.window=0; the stored deltas are still reused): 12 s -> 3 s for chapter 12's 738 blobs on two busy cores.
# A hosted source (https) ignores this command and serves with its own settings.
_UPLOAD_PACK = ("git -c uploadpack.allowFilter=true -c uploadpack.allowAnySHA1InWant=true -c pack.window=0 "
                "upload-pack")


def _fetch(chapter: str, cache: Path, manifest: dict | None, out) -> None:
    from tqdm import tqdm

    url, branch = source()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache) as tmp:
        repo = Path(tmp) / "repo.git"
        clone = ["clone", "--quiet", "--bare", "--depth=1", "--filter=blob:none", f"--upload-pack={_UPLOAD_PACK}"]
        _git([*clone, *(["--branch", branch] if branch else []), url, str(repo)], Path(tmp), url)
        _git(["config", "remote.origin.uploadpack", _UPLOAD_PACK], repo, url)
        tree = {}
        for line in _git(["ls-tree", "-r", "HEAD"], repo, url).splitlines():
            meta, path = line.split("\t", 1)
            tree[path] = meta.split()[2]
        if MANIFEST not in tree:
            raise BookDataError(f"{url} holds no {MANIFEST}: not a SAPO Lab repository")
        _fetch_blobs([tree[MANIFEST]], repo, url)
        (raw,) = _read_blobs([tree[MANIFEST]], repo)
        if hashlib.sha256(raw).hexdigest() != MANIFEST_SHA256:
            raise BookDataError(f"the data at {url} is from another version than this sapo_lab "
                                f"({MANIFEST} differs); reinstall sapo_lab from the same source")
        manifest = parse_manifest(raw.decode())
        wanted = select(manifest, CHAPTERS[chapter] + ALWAYS)
        todo = [p for p in wanted if not _verified(cache / p, manifest[p])]
        size = sum(manifest[p][1] for p in todo)
        print(f"{chapter}: fetching {len(todo)} of its {len(wanted)} files ({_megabytes(size)}) "
              f"from {url} into {cache}", file=out)
        with tqdm(total=size, unit="B", unit_scale=True, desc="fetch", file=out, mininterval=1) as bar:
            for batch in _batches(todo, manifest):
                _fetch_blobs([tree[p] for p in batch], repo, url)
                for p, data in zip(batch, _read_blobs([tree[p] for p in batch], repo), strict=True):
                    _write_checked(data, cache / p, manifest[p], url)
                bar.update(sum(manifest[p][1] for p in batch))
        received = sum(f.stat().st_size for f in (repo / "objects").rglob("*") if f.is_file())
        (cache / MANIFEST).write_bytes(raw)   # last: it marks the cache as holding this version
        print(f"{chapter}: {len(wanted)} files verified against {MANIFEST} (SHA-256); "
              f"{_megabytes(received)} received compressed; a second run reads them from the cache", file=out)


def _batches(paths: list[str], manifest: dict) -> list[list[str]]:
    batches, current, size = [], [], 0
    for p in paths:
        current.append(p)
        size += manifest[p][1]
        if size >= BATCH_BYTES:
            batches.append(current)
            current, size = [], 0
    return batches + ([current] if current else [])


def _fetch_blobs(oids: list[str], repo: Path, url: str) -> None:
    # what git itself runs to fill a partial clone: wanted objects by id, no negotiation, no refs
    _git(["-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet", "origin", "--no-tags",
          "--no-write-fetch-head", "--recurse-submodules=no", "--filter=blob:none", "--stdin"],
         repo, url, stdin="\n".join(oids) + "\n")


def _read_blobs(oids: list[str], repo: Path) -> list[bytes]:
    """The contents of ``oids``, in order, from one ``git cat-file --batch``."""
    done = subprocess.run(["git", "cat-file", "--batch"], cwd=repo, input="\n".join(oids).encode() + b"\n",
                          capture_output=True, check=True)
    blobs, at = [], 0
    for _ in oids:
        header_end = done.stdout.index(b"\n", at)
        size = int(done.stdout[at:header_end].split()[2])
        blobs.append(done.stdout[header_end + 1:header_end + 1 + size])
        at = header_end + 1 + size + 1
    return blobs


def _write_checked(data: bytes, dest: Path, entry: tuple[str, int], url: str) -> None:
    if len(data) != entry[1] or hashlib.sha256(data).hexdigest() != entry[0]:
        raise BookDataError(f"{dest.name} from {url} does not match its SHA-256 in {MANIFEST}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, dest)   # a file in the cache is whole or absent, even after an interrupt
