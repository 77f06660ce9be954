"""GPUDirect RDMA peer-memory kernel module: which one to use, is it loaded, what its errors mean.

Pure functions, stdlib only, Python 3.8+ (managed node and controller).

Two kernel modules let an RDMA NIC read and write GPU memory directly (GPUDirect RDMA):

- ``nvidia-peermem`` (loaded name ``nvidia_peermem``), shipped with the NVIDIA driver from
  R470 on (NVIDIA driver README, chapter "GPUDirect RDMA"; NVIDIA "GPUDirect RDMA"
  documentation, "Using nvidia-peermem"). It is the one to use with a driver >= 470.
- ``nv_peer_mem`` from Mellanox/nv_peer_memory (package ``nvidia-peer-memory``/
  ``nvidia-peer-memory-dkms``), built by DKMS against the installed NVIDIA driver and
  MLNX_OFED; for drivers older than 470. Version pinned here: 1.0-9.

Both need MLNX_OFED's ``ib_core``, which exports ``ib_register_peer_memory_client``; the
inbox kernel ``ib_core`` does not (Mellanox/nv_peer_memory #84, #79; fixture C24). The
maintainers' install order is MLNX_OFED -> NVIDIA driver -> peer-memory module, and the
module must be rebuilt after any OFED change. A DKMS build of nv_peer_mem needs the NVIDIA
kernel modules of the *target* kernel (Mellanox/nv_peer_memory #85; fixture C26).
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

NVIDIA_PEERMEM_MIN_DRIVER = 470
NV_PEER_MEM_VERSION = "1.0-9"
PEER_MEMORY_SYMBOL = "ib_register_peer_memory_client"
PEER_MEMORY_MODULES = ("nvidia_peermem", "nv_peer_mem")


def driver_major(version):
    """Major branch of an NVIDIA driver version: ``"535.104.05"`` -> ``535``.

    Raises ParseError for anything that does not start with digits and a dot.
    """
    m = re.match(r"^\s*(\d+)\.\d+", str(version))
    if not m:
        raise ParseError(f"NVIDIA driver version should look like 535.104.05, got {version!r}")
    return int(m.group(1))


def peer_memory_module(driver_version, peermem_available=None):
    """Which peer-memory module a node with this NVIDIA driver should load.

    ``peermem_available`` is what the node says (``modinfo nvidia-peermem`` succeeded: True,
    failed: False); None decides by version alone. Returns::

        {"module": "nvidia_peermem" | "nv_peer_mem",      # name in lsmod
         "modprobe": "nvidia-peermem" | "nv_peer_mem",    # name for modprobe / modules-load.d
         "source": "driver" | "package",
         "package": None | "nvidia-peer-memory-dkms",
         "package_version": None | "1.0-9",
         "reason": "one sentence"}

    Rule: the driver ships nvidia-peermem from R470 (NVIDIA driver README, "GPUDirect RDMA"),
    so a driver >= 470 uses it unless ``modinfo`` says it is missing; older drivers, or a
    driver build without it, use nv_peer_mem 1.0-9. Never load both.
    """
    major = driver_major(driver_version)
    ships = major >= NVIDIA_PEERMEM_MIN_DRIVER if peermem_available is None else peermem_available
    if ships:
        return {"module": "nvidia_peermem", "modprobe": "nvidia-peermem", "source": "driver",
                "package": None, "package_version": None,
                "reason": f"driver {driver_version} (>= {NVIDIA_PEERMEM_MIN_DRIVER}) ships "
                          f"nvidia-peermem; do not build nv_peer_mem"}
    why = (f"driver {driver_version} is older than {NVIDIA_PEERMEM_MIN_DRIVER}"
           if major < NVIDIA_PEERMEM_MIN_DRIVER else
           f"driver {driver_version} was installed without nvidia-peermem (modinfo fails)")
    return {"module": "nv_peer_mem", "modprobe": "nv_peer_mem", "source": "package",
            "package": "nvidia-peer-memory-dkms", "package_version": NV_PEER_MEM_VERSION,
            "reason": f"{why}: build nv_peer_mem {NV_PEER_MEM_VERSION} with DKMS after "
                      f"MLNX_OFED and the driver"}


def loaded_peer_memory_modules(lsmod_text):
    """Peer-memory modules in ``lsmod`` output: a sorted sublist of PEER_MEMORY_MODULES.

    ``lsmod`` prints a ``Module Size Used by`` header, then ``<name> <size> <count> [users]``
    rows. Raises ParseError on a row that is not of that shape (e.g. a cut line).
    """
    if lsmod_text is None:
        raise ParseError("lsmod: no input (None)")
    found = set()
    for lineno, line in enumerate(lsmod_text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[:2] == ["Module", "Size"]:
            continue
        if len(parts) < 3 or not parts[1].isdigit() or not re.match(r"^-?\d+$", parts[2]):
            raise ParseError(f"lsmod line {lineno}: expected '<module> <size> <used> [by]', "
                             f"got {line.strip()!r}")
        if parts[0] in PEER_MEMORY_MODULES:
            found.add(parts[0])
    return sorted(found)


def peer_memory_api_present(kallsyms_text):
    """True when ``/proc/kallsyms`` exports ``ib_register_peer_memory_client``.

    Same test as ``grep -w ib_register_peer_memory_client /proc/kallsyms`` (maintainers'
    preflight, Mellanox/nv_peer_memory #84): lines are ``<address> <type> <symbol>
    [module]``. False means the inbox ib_core or a broken MLNX_OFED: neither peer-memory
    module can load.
    """
    if kallsyms_text is None:
        raise ParseError("/proc/kallsyms: no input (None)")
    for line in kallsyms_text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == PEER_MEMORY_SYMBOL:
            return True
    return False


_OFED_RELEASE_RE = re.compile(r"^(?:MLNX_OFED_LINUX|OFED-internal)-([^\s:]+)", re.MULTILINE)


def ofed_release(ofed_info_text):
    """The OFED release ``ofed_info -s`` prints, or None where there is none (the inbox stack).

    MLNX_OFED prints ``MLNX_OFED_LINUX-24.10-1.1.4.0:``; DOCA-OFED (DOCA-Host, MLNX_OFED's
    successor) prints ``OFED-internal-24.07-0.3.5.0.110:`` (seen in the lshca project's issue
    #102). Both carry the peer-memory API. Empty or other text (no ofed_info on an inbox
    node, a command-not-found message) is None.
    """
    match = _OFED_RELEASE_RE.search(ofed_info_text or "")
    return match.group(1) if match else None


_KERNEL = r"(\d+\.\d+\.\d+[\w.+~-]*)"
_KERNEL_PATTERNS = (
    re.compile(rf"Bad return status for module build on kernel:\s*{_KERNEL}"),
    re.compile(rf"make\.log for \S+ for kernel {_KERNEL}"),
    re.compile(rf"Building initial module for {_KERNEL}"),
    re.compile(rf"create_nv\.symvers\.sh {_KERNEL}"),
    re.compile(rf"/lib/modules/{_KERNEL}(?:/|\s|$)", re.MULTILINE),
)
_HOST_KERNEL_RE = re.compile(rf"It is likely that {_KERNEL} belongs to a chroot's host")
_PEERMEM_TAIL = (f"with NVIDIA driver >= {NVIDIA_PEERMEM_MIN_DRIVER} use the bundled "
                 f"nvidia-peermem instead of building nv_peer_mem")


def _module_in(text):
    if re.search(r"nvidia[-_]peermem", text):
        return "nvidia_peermem"
    if re.search(r"nv_peer_mem|nvidia-peer-memory|nv_peer_memory", text):
        return "nv_peer_mem"
    return None


def _kernel_in(text):
    for pattern in _KERNEL_PATTERNS:
        m = pattern.search(text)
        if m:
            return m.group(1)
    return None


def classify_peermem_error(text):
    """Class and remedy for a peer-memory load or build failure (modprobe, dmesg, dkms).

    Returns::

        {"class": "PEER_MEM_API_MISSING" | "PEER_MEM_SYMBOL_VERSION_MISMATCH"
                  | "NVIDIA_MODULES_MISSING_FOR_KERNEL" | "DKMS_BUILD_FAILED" | "MODULE_NOT_FOUND"
                  | "UNKNOWN",
         "module": "nv_peer_mem" | "nvidia_peermem" | None,
         "kernel": "4.15.0-137-generic" or None,      # kernel the failure is about
         "host_kernel": "5.4.0-47-generic" or None,   # DKMS saw a chroot's host kernel
         "message": "what is wrong and what to do"}

    Classes:

    - ``PEER_MEM_API_MISSING``: "Unknown symbol ib_register_peer_memory_client" (modprobe/
      dmesg) or depmod's "needs unknown symbol ib_register_peer_memory_client": ib_core lacks
      the peer-memory API (inbox ib_core, or OFED changed after the module was built; C24);
    - ``PEER_MEM_SYMBOL_VERSION_MISMATCH``: "disagrees about version of symbol": built
      against another OFED than the one loaded;
    - ``NVIDIA_MODULES_MISSING_FOR_KERNEL``: "Cannot locate nvidia modules" / "CUDA driver
      must be installed before installing this package" in the DKMS build: no NVIDIA kernel
      modules for the target kernel (C26, image build with two kernels);
    - ``DKMS_BUILD_FAILED``: "Bad return status for module build" without the make.log
      content; the message names the make.log to read (and the chroot case);
    - ``MODULE_NOT_FOUND``: "modprobe: FATAL: Module ... not found";
    - ``UNKNOWN``: anything else; the message quotes the first error line.

    Raises ParseError for empty text.
    """
    if text is None or not str(text).strip():
        raise ParseError("peer-memory error text is empty: pass the modprobe/dmesg/dkms output")
    text = str(text)
    module = _module_in(text)
    kernel = _kernel_in(text)
    host = _HOST_KERNEL_RE.search(text)
    host_kernel = host.group(1) if host else None
    name = module or "the peer-memory module"
    on_kernel = f" for kernel {kernel}" if kernel else ""

    if re.search(r"disagrees about version of symbol\s+ib_\w*peer_memory_client", text):
        klass = "PEER_MEM_SYMBOL_VERSION_MISMATCH"
        message = (f"{name}{on_kernel} was built against another MLNX_OFED than the ib_core now "
                   f"loaded: rebuild it (dkms remove/install, or reinstall the package) after "
                   f"the OFED install, then modprobe again; {_PEERMEM_TAIL}")
    elif re.search(r"[Uu]nknown symbol\s+ib_\w*peer_memory_client", text):
        klass = "PEER_MEM_API_MISSING"
        message = (f"{name}{on_kernel} needs {PEER_MEMORY_SYMBOL}, which only MLNX_OFED's "
                   f"ib_core exports: check that `grep -w {PEER_MEMORY_SYMBOL} /proc/kallsyms` "
                   f"is non-empty (empty: inbox ib_core or a broken OFED install); install in "
                   f"the order MLNX_OFED -> NVIDIA driver -> peer-memory module and rebuild the "
                   f"module after any OFED change (remove and reinstall it); {_PEERMEM_TAIL}")
    elif ("Cannot locate nvidia modules" in text
          or "CUDA driver must be installed before installing this package" in text):
        klass = "NVIDIA_MODULES_MISSING_FOR_KERNEL"
        target = kernel or "the target kernel"
        message = (f"DKMS built {name} for {target}, which has no NVIDIA kernel modules: "
                   f"install the NVIDIA driver for {target} first (check `modinfo -k {target} "
                   f"nvidia` and `dkms status`)")
        if host_kernel:
            message += (f"; this is an image build (chroot): the running kernel {host_kernel} "
                        f"is the build host's, so pass the target kernel explicitly "
                        f"(dkms install -k {target})")
        message += f"; {_PEERMEM_TAIL}"
    elif "Bad return status for module build" in text:
        klass = "DKMS_BUILD_FAILED"
        log = re.search(r"Consult (\S+make\.log)", text)
        message = (f"the DKMS build of {name}{on_kernel} failed: read "
                   f"{log.group(1) if log else 'the DKMS make.log'} and classify it again")
        if host_kernel:
            message += (f"; this is an image build (chroot): {host_kernel} is the build host's "
                        f"kernel, pass the target kernel explicitly (dkms install -k "
                        f"{kernel or '<target>'})")
        message += f"; {_PEERMEM_TAIL}"
    elif re.search(r"modprobe: FATAL: Module \S+ not found", text):
        klass = "MODULE_NOT_FOUND"
        message = (f"{name} is not installed for the running kernel{on_kernel}: with NVIDIA "
                   f"driver >= {NVIDIA_PEERMEM_MIN_DRIVER} it comes with the driver "
                   f"(nvidia-peermem), else install nvidia-peer-memory-dkms "
                   f"{NV_PEER_MEM_VERSION}")
    else:
        klass = "UNKNOWN"
        first = next((ln.strip() for ln in text.splitlines()
                      if re.search(r"error|fail|fatal", ln, re.IGNORECASE)),
                     text.strip().splitlines()[0].strip())
        message = f"unrecognised peer-memory failure: {first!r}; read dmesg and the DKMS make.log"
    return {"class": klass, "module": module, "kernel": kernel, "host_kernel": host_kernel,
            "message": message}
