"""Throughput and memory of sealbench's streaming AEAD against OpenSSL, Tink and gpg, measured in
one run on one machine. A script, not a test (pytest collects nothing here)::

    .venv/bin/python tests/perf/crypto_bench.py [--size-mib 1024] [--tink-mib N] [--gpg-mib 128]

Rates are GB/s (10^9 bytes of plaintext per second); in-memory rates are the median of 3 runs.

- ``openssl speed -elapsed -evp aes-256-gcm -bytes 1048576 -seconds 3``: raw AES-256-GCM over
  one 1 MiB buffer that stays in cache, the ceiling (``-decrypt`` too, for information), in wall
  time like every other rate of the table (without ``-elapsed`` openssl divides by its own user
  CPU seconds, which on a busy machine made ours, in wall seconds, look slower than it is).
  Ratios use the encrypt figure, as the issue specifies.
- per CPU second: ``openssl speed`` without ``-elapsed`` (bytes per user CPU second of openssl)
  beside ``encrypt_into`` / ``decrypt_into`` timed by this process's user CPU seconds, the
  comparison a loaded machine does not distort.
- memory to memory, bytes API: ``encrypt_bytes`` / ``decrypt_bytes``; each call returns a new
  object of the full size. Beside it the memory floor: building a new object of that size by
  copying (what any API that returns fresh memory pays before any cryptography).
- memory to memory, buffer API: ``encrypt_into`` / ``decrypt_into`` into one preallocated output
  buffer reused across runs (no allocation, no copy beyond AES-GCM's own read and write).
- memory to memory, stream API: ``encrypt_stream`` / ``decrypt_stream`` from an ``io.BytesIO``
  into (a) a preallocated in-memory sink reused across runs and (b) a sink that discards (the
  cipher pipeline alone). Tink's Python streaming AEAD (AES256_GCM_HKDF_1MB) is measured with
  the same source and the same two sinks, writing and reading 1 MiB at a time.
- file to file: ``encrypt_file`` / ``decrypt_file`` (temp file, fsync, rename), each in a child
  process that reports its peak resident memory (``VmHWM``), at the full size and at 1/16 of it
  (memory must not grow with size); beside it the file-system floor (a plain 1 MiB-chunk copy +
  fsync of the same file) and ``gpg --symmetric --batch --passphrase-fd 0 --cipher-algo AES256``
  (MedPerf's method; loopback pinentry, throwaway home), with its default zlib compression and
  with ``--compress-algo none``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sealbench.crypto import streaming

MIB = 1 << 20
OPENSSL_CMD = ["openssl", "speed", "-evp", "aes-256-gcm", "-bytes", "1048576", "-seconds", "3"]
#: OpenSSL's rates per wall second (its default is per user CPU second of its own process).
ELAPSED = ["-elapsed"]
GPG = "/usr/bin/gpg"
PASSPHRASE = b"sealbench benchmark passphrase\n"

CHILD = r"""
import json, os, sys, time
from pathlib import Path
from sealbench.crypto import streaming
op, key_hex, src, dst = sys.argv[1:5]
key = bytes.fromhex(key_hex)
fn = {"encrypt": streaming.encrypt_file, "decrypt": streaming.decrypt_file}.get(op)
t = time.perf_counter()
if fn is not None:
    fn(key, Path(src), Path(dst), b"bench")
elapsed = time.perf_counter() - t
status = Path("/proc/self/status").read_text()
hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
print(json.dumps({"seconds": elapsed, "vmhwm_kib": hwm}))
"""


class Sink:
    """A preallocated in-memory destination, reused between runs (no allocator in the timing)."""

    def __init__(self, size: int) -> None:
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self.pos = 0

    def write(self, data: bytes | memoryview) -> int:
        n = len(data)
        self._view[self.pos : self.pos + n] = data
        self.pos += n
        return n

    def reset(self) -> None:
        self.pos = 0

    def value(self) -> memoryview:
        return self._view[: self.pos]

    # Tink closes its destination; the sink stays usable.
    closed = False

    def close(self) -> None:
        return None

    def flush(self) -> None:
        return None

    def writable(self) -> bool:
        return True


def gbps(size: int, seconds: float) -> float:
    return size / seconds / 1e9


def median_rate(size: int, run: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return gbps(size, statistics.median(times))


#: Each CPU-time sample runs at least this long: the kernel counts CPU time in clock ticks.
CPU_SAMPLE_S = 0.5


def median_cpu_rate(size: int, run: Callable[[], object], repeat: int = 3) -> float:
    """GB/s per user CPU second of this process (all its threads), the median of ``repeat``
    samples of at least :data:`CPU_SAMPLE_S` each: what ``openssl speed`` reports without
    ``-elapsed``."""
    rates = []
    for _ in range(repeat):
        start, runs = os.times().user, 0
        while (spent := os.times().user - start) < CPU_SAMPLE_S:
            run()
            runs += 1
        rates.append(gbps(size * runs, spent))
    return statistics.median(rates)


def openssl_rate(decrypt: bool = False, elapsed: bool = True) -> float:
    """OpenSSL's AES-256-GCM rate in GB/s: per wall second (``-elapsed``, as every other rate
    here) or per user CPU second of openssl (``elapsed=False``)."""
    cmd = [*OPENSSL_CMD[:2], *(ELAPSED if elapsed else []), *(["-decrypt"] if decrypt else []),
           *OPENSSL_CMD[2:]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout
    match = re.search(r"^AES-256-GCM\s+([0-9.]+)k\s*$", out, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"cannot parse openssl speed output: {out!r}")
    return float(match.group(1)) * 1000 / 1e9  # openssl reports 1000s of bytes per second


def child_file_op(op: str, key: bytes, src: Path, dst: Path) -> dict[str, float]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, op, key.hex(), str(src), str(dst)],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    # VmHWM, not ru_maxrss: Linux carries the parent's RSS at fork into the child's ru_maxrss.
    if proc.wait() != 0:
        raise RuntimeError(f"child {op} failed with exit code {proc.returncode}")
    report: dict[str, float] = json.loads(out)
    return report


def copy_with_fsync(src: Path, dst: Path) -> float:
    t = time.perf_counter()
    with src.open("rb") as fin, dst.open("wb") as fout:
        shutil.copyfileobj(fin, fout, MIB)
        fout.flush()
        os.fsync(fout.fileno())
    return time.perf_counter() - t


def gpg_rates(workdir: Path, plaintext: bytes, compress: bool) -> tuple[float, float]:
    home = workdir / "gnupg"
    home.mkdir(mode=0o700, exist_ok=True)
    src, enc, dec = workdir / "gpg.in", workdir / "gpg.gpg", workdir / "gpg.out"
    src.write_bytes(plaintext)
    base = [GPG, "--homedir", str(home), "--batch", "--yes", "--quiet",
            "--pinentry-mode", "loopback", "--passphrase-fd", "0"]
    t = time.perf_counter()
    level = [] if compress else ["--compress-algo", "none"]
    subprocess.run([*base, "--symmetric", "--cipher-algo", "AES256", *level, "--output",
                    str(enc), str(src)], input=PASSPHRASE, check=True, timeout=1800)
    t_enc = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run([*base, "--decrypt", "--output", str(dec), str(enc)],
                   input=PASSPHRASE, check=True, timeout=1800, stderr=subprocess.DEVNULL)
    t_dec = time.perf_counter() - t
    if dec.read_bytes() != plaintext:
        raise RuntimeError("gpg round trip mismatch")
    for p in (src, enc, dec):
        p.unlink()
    return gbps(len(plaintext), t_enc), gbps(len(plaintext), t_dec)


class Discard:
    """A destination that drops what it is given: isolates the cipher pipeline from the sink."""

    closed = False

    def write(self, data: bytes | memoryview) -> int:
        return len(data)

    def close(self) -> None:
        return None

    def flush(self) -> None:
        return None

    def writable(self) -> bool:
        return True


Rates = tuple[float, float]


def tink_rates(key: bytes, plaintext: bytes) -> dict[str, Rates]:
    import tink
    from tink import secret_key_access, streaming_aead
    from tink.proto import aes_gcm_hkdf_streaming_pb2, common_pb2, tink_pb2

    streaming_aead.register()
    params = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingParams(
        ciphertext_segment_size=streaming.SEGMENT_SIZE, derived_key_size=32,
        hkdf_hash_type=common_pb2.SHA256)
    key_proto = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingKey(params=params, key_value=key)
    keyset = tink_pb2.Keyset(primary_key_id=1, key=[tink_pb2.Keyset.Key(
        key_data=tink_pb2.KeyData(
            type_url="type.googleapis.com/google.crypto.tink.AesGcmHkdfStreamingKey",
            value=key_proto.SerializeToString(), key_material_type=tink_pb2.KeyData.SYMMETRIC),
        status=tink_pb2.ENABLED, key_id=1, output_prefix_type=tink_pb2.RAW)])
    handle = tink.proto_keyset_format.parse(keyset.SerializeToString(), secret_key_access.TOKEN)
    primitive = handle.primitive(streaming_aead.StreamingAead)
    size = len(plaintext)
    ciphertext = streaming.encrypt_bytes(key, plaintext, b"bench")
    sinks = {"sink": (Sink(len(ciphertext)), Sink(size)), "discard": (Discard(), Discard())}
    rates: dict[str, Rates] = {}
    for name, (csink, psink) in sinks.items():

        def encrypt(csink: Sink | Discard = csink) -> None:
            if isinstance(csink, Sink):
                csink.reset()
            with primitive.new_encrypting_stream(csink, b"bench") as w:
                view = memoryview(plaintext)
                for i in range(0, size, MIB):
                    w.write(view[i : i + MIB])

        def decrypt(psink: Sink | Discard = psink) -> None:
            if isinstance(psink, Sink):
                psink.reset()
            with primitive.new_decrypting_stream(io.BytesIO(ciphertext), b"bench") as r:
                while chunk := r.read(MIB):
                    psink.write(chunk)

        rates[name] = (median_rate(size, encrypt), median_rate(size, decrypt))
        if isinstance(psink, Sink) and psink.value() != plaintext:
            raise RuntimeError("tink round trip mismatch")
    return rates


def cpu_rates(key: bytes, plaintext: bytes) -> dict[str, Rates]:
    """OpenSSL's and our AES-256-GCM per user CPU second, interleaved (openssl, ours, openssl):
    the cipher path into a reused buffer, so neither side pays an allocation."""
    size, ad = len(plaintext), b"bench"
    ciphertext = streaming.encrypt_bytes(key, plaintext, ad)
    cbuf, pbuf = bytearray(len(ciphertext)), bytearray(size)
    streaming.encrypt_into(key, plaintext, cbuf, ad)
    streaming.decrypt_into(key, ciphertext, pbuf, ad)
    if pbuf != plaintext:
        raise RuntimeError("buffer round trip mismatch")
    before = (openssl_rate(elapsed=False), openssl_rate(decrypt=True, elapsed=False))
    ours = (
        median_cpu_rate(size, lambda: streaming.encrypt_into(key, plaintext, cbuf, ad)),
        median_cpu_rate(size, lambda: streaming.decrypt_into(key, ciphertext, pbuf, ad)),
    )
    after = (openssl_rate(elapsed=False), openssl_rate(decrypt=True, elapsed=False))
    openssl = ((before[0] + after[0]) / 2, (before[1] + after[1]) / 2)
    return {"ours": ours, "openssl": openssl}


def memory_rates(key: bytes, plaintext: bytes) -> dict[str, Rates]:
    """Our memory-to-memory paths and the memory floor, on the same plaintext."""
    size, ad = len(plaintext), b"bench"
    ciphertext = streaming.encrypt_bytes(key, plaintext, ad)
    if streaming.decrypt_bytes(key, ciphertext, ad) != plaintext:
        raise RuntimeError("round trip mismatch")
    rates: dict[str, Rates] = {}
    rates["bytes"] = (
        median_rate(size, lambda: streaming.encrypt_bytes(key, plaintext, ad)),
        median_rate(size, lambda: streaming.decrypt_bytes(key, ciphertext, ad)),
    )

    def fresh_copy() -> bytes:
        buf = io.BytesIO()
        view = memoryview(plaintext)
        for i in range(0, size, MIB):
            buf.write(view[i : i + MIB])
        return buf.getvalue()

    floor = median_rate(size, fresh_copy)
    rates["floor"] = (floor, floor)
    # The allocation-free API into one reused output buffer per direction (touched once before
    # timing, as a long-lived buffer would be).
    cbuf, pbuf = bytearray(len(ciphertext)), bytearray(size)
    streaming.encrypt_into(key, plaintext, cbuf, ad)
    streaming.decrypt_into(key, ciphertext, pbuf, ad)
    rates["into"] = (
        median_rate(size, lambda: streaming.encrypt_into(key, plaintext, cbuf, ad)),
        median_rate(size, lambda: streaming.decrypt_into(key, ciphertext, pbuf, ad)),
    )
    if pbuf != plaintext:
        raise RuntimeError("buffer round trip mismatch")
    for name, csink, psink in (
        ("sink", Sink(len(ciphertext)), Sink(size)),
        ("discard", Discard(), Discard()),
    ):

        def enc(csink: Sink | Discard = csink) -> None:
            if isinstance(csink, Sink):
                csink.reset()
            streaming.encrypt_stream(key, io.BytesIO(plaintext), csink, ad)

        def dec(psink: Sink | Discard = psink) -> None:
            if isinstance(psink, Sink):
                psink.reset()
            streaming.decrypt_stream(key, io.BytesIO(ciphertext), psink, ad)

        rates[name] = (median_rate(size, enc), median_rate(size, dec))
        if isinstance(psink, Sink) and psink.value() != plaintext:
            raise RuntimeError("stream round trip mismatch")
    return rates


def file_rates(key: bytes, work: Path, plaintext: bytes, gpg_size: int) -> dict[str, object]:
    """Our file-to-file paths in child processes (with their peak RSS), the file-system floor,
    and gpg."""
    size = len(plaintext)
    src = work / "plain.bin"
    src.write_bytes(plaintext)
    small = work / "small.bin"
    small.write_bytes(plaintext[: size // 16])
    # Flush the freshly written sources first: otherwise their writeback competes with the
    # first timed operation (encrypt) and not with the others, which skews the comparison.
    os.sync()
    result: dict[str, object] = {"idle": child_file_op("none", key, src, src)}
    for name, path in (("full", src), ("small", small)):
        enc = child_file_op("encrypt", key, path, work / f"{name}.enc")
        dec = child_file_op("decrypt", key, work / f"{name}.enc", work / f"{name}.out")
        if (work / f"{name}.out").stat().st_size != path.stat().st_size:
            raise RuntimeError("file round trip size mismatch")
        result[name] = (enc, dec, path.stat().st_size)
        (work / f"{name}.out").unlink()
        (work / f"{name}.enc").unlink()
    enc, dec, _ = result["full"]  # type: ignore[misc]
    result["ours"] = (gbps(size, enc["seconds"]), gbps(size, dec["seconds"]))
    copy = gbps(size, copy_with_fsync(src, work / "copy.bin"))
    (work / "copy.bin").unlink()
    result["floor"] = (copy, copy)
    result["gpg"] = gpg_rates(work, plaintext[:gpg_size], compress=True)
    result["gpg-z0"] = gpg_rates(work, plaintext[:gpg_size], compress=False)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--tink-mib", type=int, default=None, help="default: --size-mib")
    parser.add_argument("--gpg-mib", type=int, default=128)
    parser.add_argument("--workdir", type=Path, default=None, help="default: system temp dir")
    args = parser.parse_args()
    size = args.size_mib * MIB
    tink_size = (args.tink_mib or args.size_mib) * MIB
    gpg_size = args.gpg_mib * MIB
    key = os.urandom(32)

    print(f"# sealbench crypto benchmark: {args.size_mib} MiB, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    ossl_enc, ossl_dec = openssl_rate(), openssl_rate(decrypt=True)
    print(f"openssl speed -elapsed -evp aes-256-gcm -bytes 1048576: encrypt {ossl_enc:.2f} GB/s, "
          f"-decrypt {ossl_dec:.2f} GB/s per wall second (ratios use the encrypt figure)",
          flush=True)

    plaintext = os.urandom(size)
    cpu = cpu_rates(key, plaintext)
    mem = memory_rates(key, plaintext)
    tink = tink_rates(key, plaintext[:tink_size])
    work = Path(tempfile.mkdtemp(prefix="sealbench-bench-", dir=args.workdir))
    try:
        files = file_rates(key, work, plaintext, gpg_size)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    t_mib, g_mib = tink_size // MIB, gpg_size // MIB
    rows: list[tuple[str, Rates]] = [
        ("ours, encrypt_bytes/decrypt_bytes (new object)", mem["bytes"]),
        ("  memory floor: copy into a new object", mem["floor"]),
        ("ours, encrypt_into/decrypt_into (reused buffer)", mem["into"]),
        ("ours, stream API, BytesIO -> reused sink", mem["sink"]),
        (f"tink streaming AEAD, same source/sink ({t_mib} MiB)", tink["sink"]),
        ("ours, stream API, BytesIO -> discarding sink", mem["discard"]),
        (f"tink streaming AEAD, discarding sink ({t_mib} MiB)", tink["discard"]),
        ("ours, encrypt_file/decrypt_file (fsync+rename)", files["ours"]),  # type: ignore[list-item]
        ("  file floor: plain copy + fsync", files["floor"]),  # type: ignore[list-item]
        (f"gpg --symmetric AES256, default zlib ({g_mib} MiB)", files["gpg"]),  # type: ignore[list-item]
        (f"gpg --symmetric AES256 -z 0 ({g_mib} MiB)", files["gpg-z0"]),  # type: ignore[list-item]
    ]
    print(f"\n{'path (GB/s of plaintext)':52} {'encrypt':>8} {'decrypt':>8}")
    for name, (e, d) in rows:
        print(f"{name:52} {e:8.2f} {d:8.2f}")

    gpg, gpg0 = files["gpg"], files["gpg-z0"]
    print(f"\n{'ratios: encrypt / decrypt':40} {'/openssl':>13} {'/tink':>13} "
          f"{'/gpg':>13} {'/gpg -z0':>13}")
    for name, (e, d), t in (
        ("ours bytes API", mem["bytes"], tink["sink"]),
        ("ours into a reused buffer", mem["into"], tink["sink"]),
        ("ours stream, reused sink", mem["sink"], tink["sink"]),
        ("ours stream, discarding sink", mem["discard"], tink["discard"]),
        ("ours file->file", files["ours"], tink["sink"]),
    ):
        print(f"{name:40} {e / ossl_enc:6.2f} {d / ossl_enc:6.2f} "
              f"{e / t[0]:6.2f} {d / t[1]:6.2f} "
              f"{e / gpg[0]:6.1f} {d / gpg[1]:6.1f} "  # type: ignore[index]
              f"{e / gpg0[0]:6.1f} {d / gpg0[1]:6.1f}")  # type: ignore[index]

    (c_enc, c_dec), (o_enc, o_dec) = cpu["ours"], cpu["openssl"]
    print("\nper user CPU second (openssl speed without -elapsed; ours: encrypt_into/decrypt_into "
          "timed by os.times().user)")
    print(f"  openssl    encrypt {o_enc:6.2f} GB/s   decrypt {o_dec:6.2f} GB/s")
    print(f"  ours       encrypt {c_enc:6.2f} GB/s   decrypt {c_dec:6.2f} GB/s")
    print(f"  ours / openssl     {c_enc / o_enc:6.2f}x                {c_dec / o_dec:6.2f}x")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")

    print("\npeak resident memory (VmHWM) of a child process running encrypt_file/decrypt_file")
    idle = files["idle"]
    print(f"  python + imports, no work          {idle['vmhwm_kib'] / 1024:7.1f} MiB")  # type: ignore[index]
    for name in ("full", "small"):
        enc, dec, n = files[name]  # type: ignore[misc]
        for op, rep in (("encrypt", enc), ("decrypt", dec)):
            print(f"  {op} {n / MIB:6.0f} MiB file->file       {rep['vmhwm_kib'] / 1024:7.1f} MiB")


if __name__ == "__main__":
    main()
