"""The seccomp profile of the sandbox containers.

Docker's default profile lets a container without CAP_SYS_ADMIN call no `unshare` at all, yet every program run
needs new user, IPC and pid namespaces of its own (see `_enter_run_namespaces` in the harness: that is what keeps
one job's shared memory, message queues and signals from the next). This profile refuses what Docker's default
refuses a container without capabilities (kernel modules, mounts, keyrings, BPF, perf, namespaces, clock and
swap changes, reboot, ...), refuses io_uring too, and allows `unshare` with user, IPC and pid namespaces
(CLONE_NEWUSER, CLONE_NEWIPC, CLONE_NEWPID) and no other: no mount, network, UTS, time or cgroup namespace, no
`setns`, and `clone` still refuses every namespace flag. Every other system call is allowed, as under Docker's default for the
calls a program uses; capabilities stay dropped and no-new-privileges set, so none of these calls gains a
privilege the kernel would otherwise refuse.
"""
from __future__ import annotations

import json
import platform
from functools import cache

CLONE_NEWTIME, CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00000080, 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
EPERM, ENOSYS = 1, 38

REFUSED = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module", "fanotify_init",
    "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms", "init_module", "io_uring_enter",
    "io_uring_register", "io_uring_setup", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl",
    "lookup_dcookie", "mount", "mount_setattr", "move_mount", "name_to_handle_at", "nfsservctl", "open_by_handle_at",
    "open_tree", "perf_event_open", "pivot_root", "quotactl", "quotactl_fd", "reboot", "request_key",
    "setdomainname", "sethostname", "setns", "settimeofday", "stime", "swapoff", "swapon", "_sysctl", "sysfs",
    "syslog", "umount", "umount2", "uselib", "userfaultfd", "ustat", "vm86", "vm86old", "chroot",
)


@cache
def profile_json() -> str:
    """The profile as Docker's `--security-opt seccomp=` takes it (the JSON text itself)."""
    rules = [{"names": list(REFUSED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM},
             # clone3 hides its flags in memory seccomp cannot read: ENOSYS sends libc back to clone
             {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}]
    # One rule per flag (rules are or'ed; Docker's format: for SCMP_CMP_MASKED_EQ `value` is the mask, `valueTwo`
    # the datum): clone may make no namespace, unshare only user, IPC and pid ones (an IPC or pid namespace alone
    # needs CAP_SYS_ADMIN over the current one, which only a user namespace made before gives)
    for flag in (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWNET, CLONE_NEWTIME):
        for call in ("clone", "unshare"):
            rules.append({"names": [call], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
                          "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]})
    for flag in (CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID):
        rules.append({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
                      "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]})
    # every ABI this machine's processes can call the kernel through gets the rules (a 64-bit x86 program can
    # make 32-bit calls, whose numbers differ)
    arm = platform.machine() in ("aarch64", "arm64")
    arches = ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"] if arm else ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    return json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "architectures": arches, "syscalls": rules})
