//! `spec` reads what `oci-spec` writes (peapod-spec writes every container's spec with it):
//! the field names and shapes of the two agree.

use super::*;
use oci_spec::runtime::{
    Arch, LinuxBlockIoBuilder, LinuxCpuBuilder, LinuxDeviceBuilder, LinuxDeviceCgroupBuilder,
    LinuxDeviceType, LinuxHugepageLimitBuilder, LinuxMemoryBuilder, LinuxPidsBuilder,
    LinuxResourcesBuilder, LinuxSeccompAction, LinuxSeccompArgBuilder, LinuxSeccompBuilder,
    LinuxSeccompOperator, LinuxSyscallBuilder, LinuxThrottleDeviceBuilder,
    LinuxWeightDeviceBuilder, Spec as OciSpec,
};

/// oci-spec's default spec (a process with capabilities and rlimits, mounts, namespaces,
/// masked and read-only paths, a device rule) with resources, devices and seccomp added.
fn written() -> Vec<u8> {
    let resources = LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(1_000_000)
                .swap(2_000_000)
                .reservation(500_000)
                .swappiness(10u64)
                .disable_oom_killer(true)
                .build()
                .unwrap(),
        )
        .cpu(
            LinuxCpuBuilder::default()
                .shares(512u64)
                .quota(50_000)
                .period(100_000u64)
                .cpus("0-1")
                .build()
                .unwrap(),
        )
        .pids(LinuxPidsBuilder::default().limit(64).build().unwrap())
        .hugepage_limits(vec![LinuxHugepageLimitBuilder::default()
            .page_size("2MB")
            .limit(1 << 21)
            .build()
            .unwrap()])
        .block_io(
            LinuxBlockIoBuilder::default()
                .weight(300u16)
                .weight_device(vec![LinuxWeightDeviceBuilder::default()
                    .major(8)
                    .minor(0)
                    .weight(200u16)
                    .build()
                    .unwrap()])
                .throttle_read_iops_device(vec![LinuxThrottleDeviceBuilder::default()
                    .major(8)
                    .minor(0)
                    .rate(100u64)
                    .build()
                    .unwrap()])
                .build()
                .unwrap(),
        )
        .devices(vec![LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .typ(LinuxDeviceType::C)
            .major(10)
            .minor(229)
            .access("rw")
            .build()
            .unwrap()])
        .build()
        .unwrap();
    let seccomp = LinuxSeccompBuilder::default()
        .default_action(LinuxSeccompAction::ScmpActErrno)
        .default_errno_ret(38u32)
        .architectures(vec![Arch::ScmpArchX86_64])
        .syscalls(vec![LinuxSyscallBuilder::default()
            .names(vec!["personality".to_string()])
            .action(LinuxSeccompAction::ScmpActAllow)
            .args(vec![LinuxSeccompArgBuilder::default()
                .index(0usize)
                .value(8u64)
                .op(LinuxSeccompOperator::ScmpCmpEq)
                .build()
                .unwrap()])
            .build()
            .unwrap()])
        .build()
        .unwrap();
    let default = OciSpec::default();
    let mut linux = default.linux().clone().unwrap_or_default();
    linux.set_resources(Some(resources));
    linux.set_seccomp(Some(seccomp));
    linux.set_cgroups_path(Some("/kubepods/pod1/c1".into()));
    linux.set_devices(Some(vec![LinuxDeviceBuilder::default()
        .path("/dev/fuse")
        .typ(LinuxDeviceType::C)
        .major(10)
        .minor(229)
        .file_mode(0o600u32)
        .build()
        .unwrap()]));
    let mut spec = default;
    spec.set_linux(Some(linux));
    spec.set_hostname(Some("pod-a".into()));
    serde_json::to_vec(&spec).unwrap()
}

#[test]
fn what_oci_spec_writes_is_read_here() {
    let spec: Spec = serde_json::from_slice(&written()).unwrap();
    let root = spec.root.as_ref().unwrap();
    assert_eq!(root.path, PathBuf::from("rootfs"));
    assert!(root.readonly);
    assert_eq!(spec.hostname.as_deref(), Some("pod-a"));
    let process = spec.process.as_ref().unwrap();
    assert_eq!(process.args, ["sh"]);
    assert!(process.env.iter().any(|e| e.starts_with("PATH=")));
    assert_eq!(process.cwd, "/");
    let caps = process.capabilities.as_ref().unwrap();
    assert!(caps.bounding.iter().any(|c| c == "CAP_KILL"), "{caps:?}");
    assert_eq!(process.rlimits[0].kind, "RLIMIT_NOFILE");
    assert!(process.no_new_privileges);
    assert!(spec
        .mounts
        .iter()
        .any(|m| m.destination == "/proc" && m.kind == "proc"));
    let linux = &spec.linux;
    assert!(linux.namespaces.iter().any(|n| n.kind == "mount"));
    assert!(linux.namespaces.iter().any(|n| n.kind == "network"));
    assert!(linux.masked_paths.iter().any(|p| p == "/proc/kcore"));
    assert!(linux.readonly_paths.iter().any(|p| p == "/proc/sys"));
    assert_eq!(linux.cgroups_path, "/kubepods/pod1/c1");
    assert_eq!(linux.devices[0].path, "/dev/fuse");
    assert_eq!(
        (linux.devices[0].kind.as_str(), linux.devices[0].minor),
        ("c", 229)
    );
    assert_eq!(linux.devices[0].file_mode, Some(0o600));

    let r = linux.resources.as_ref().unwrap();
    let m = r.memory.as_ref().unwrap();
    assert_eq!(
        (m.limit, m.swap, m.reservation),
        (Some(1_000_000), Some(2_000_000), Some(500_000))
    );
    assert_eq!((m.swappiness, m.disable_oom_killer), (Some(10), Some(true)));
    let c = r.cpu.as_ref().unwrap();
    assert_eq!(
        (c.shares, c.quota, c.period),
        (Some(512), Some(50_000), Some(100_000))
    );
    assert_eq!(c.cpus.as_deref(), Some("0-1"));
    assert_eq!(r.pids.as_ref().and_then(|p| p.limit), Some(64));
    assert_eq!(r.hugepage_limits[0].page_size, "2MB");
    let b = r.block_io.as_ref().unwrap();
    assert_eq!(b.weight, Some(300));
    assert_eq!(b.weight_device[0].weight, Some(200));
    assert_eq!(b.throttle_read_iops_device[0].rate, 100);
    assert_eq!(r.devices[0].kind.as_deref(), Some("c"));
    assert_eq!(
        (r.devices[0].major, r.devices[0].access.as_deref()),
        (Some(10), Some("rw"))
    );
    assert!(r.others.is_empty(), "{:?}", r.others);

    let s = linux.seccomp.as_ref().unwrap();
    assert_eq!(
        (s.default_action.as_str(), s.default_errno_ret),
        ("SCMP_ACT_ERRNO", Some(38))
    );
    assert_eq!(s.architectures, ["SCMP_ARCH_X86_64"]);
    let arg = &s.syscalls[0].args[0];
    assert_eq!(
        (arg.index, arg.value, arg.op.as_str()),
        (0, 8, "SCMP_CMP_EQ")
    );
}

#[test]
fn a_process_alone_is_read_as_an_exec_sends_it() {
    let spec = OciSpec::default();
    let json = serde_json::to_vec(spec.process().as_ref().unwrap()).unwrap();
    let process: Process = serde_json::from_slice(&json).unwrap();
    assert_eq!(process.args, ["sh"]);
    assert!(process.capabilities.is_some());
}
