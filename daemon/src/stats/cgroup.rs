//! CPU and memory figures from a process's cgroups, v1 (incl. hybrid) and v2, and the
//! pressure stall information (PSI) of its cgroup v2.
//!
//! The cgroups are found from `/proc/<pid>/cgroup` (parsed by `peapod_host::cgroup`), so the
//! same code serves both cgroup drivers. Parsing is separate from reading so that the v1 and v2 layouts are unit-tested
//! with fixtures on any host.

use peapod_host::cgroup::{is_unified, v1_dir, ProcCgroups};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What one cgroup reports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub cpu_ns: Option<u64>,
    pub memory_usage: Option<u64>,
    pub working_set: Option<u64>,
    pub rss: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    /// None when unlimited.
    pub memory_limit: Option<u64>,
    /// Swap in use (v2 `memory.swap.current`; v1 `memory.memsw.usage_in_bytes` less the
    /// memory's, where swap is accounted).
    pub swap_usage: Option<u64>,
    /// The swap it may use; None when unlimited.
    pub swap_limit: Option<u64>,
}

impl Usage {
    /// Adds another cgroup's figures (a pod's total). The sum has no limit of its own.
    pub fn add(&mut self, other: &Usage) {
        fn plus(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            }
        }
        self.cpu_ns = plus(self.cpu_ns, other.cpu_ns);
        self.memory_usage = plus(self.memory_usage, other.memory_usage);
        self.working_set = plus(self.working_set, other.working_set);
        self.rss = plus(self.rss, other.rss);
        self.page_faults = plus(self.page_faults, other.page_faults);
        self.major_page_faults = plus(self.major_page_faults, other.major_page_faults);
        self.swap_usage = plus(self.swap_usage, other.swap_usage);
        self.memory_limit = None;
        self.swap_limit = None;
    }
}

/// `key value` lines (memory.stat, cpu.stat).
pub fn parse_flat_keyed(text: &str) -> HashMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?, it.next()?.parse().ok()?))
        })
        .collect()
}

/// A v1 memory limit above this is "no limit" (the kernel reports a page-rounded i64 max).
const V1_UNLIMITED: u64 = 1 << 62;

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn number(text: Option<String>) -> Option<u64> {
    text?.trim().parse().ok()
}

/// Reads the usage of the cgroups in `paths` under the cgroup mount `root`.
pub fn read_usage(root: &Path, paths: &ProcCgroups) -> Usage {
    let mut u = Usage::default();
    let pure_v2 = is_unified(root);
    if !pure_v2 {
        if let Some(dir) = paths
            .v1
            .get("cpuacct")
            .and_then(|p| v1_dir(root, "cpuacct", p))
        {
            u.cpu_ns = number(read(&dir.join("cpuacct.usage")));
        }
        if let Some(dir) = paths
            .v1
            .get("memory")
            .and_then(|p| v1_dir(root, "memory", p))
        {
            u.memory_usage = number(read(&dir.join("memory.usage_in_bytes")));
            u.memory_limit =
                number(read(&dir.join("memory.limit_in_bytes"))).filter(|l| *l < V1_UNLIMITED);
            // memsw counts memory and swap together (where the kernel accounts swap).
            let memsw = number(read(&dir.join("memory.memsw.usage_in_bytes")));
            u.swap_usage = memsw
                .zip(u.memory_usage)
                .map(|(both, m)| both.saturating_sub(m));
            let memsw_limit = number(read(&dir.join("memory.memsw.limit_in_bytes")))
                .filter(|l| *l < V1_UNLIMITED);
            u.swap_limit = memsw_limit
                .zip(u.memory_limit)
                .map(|(both, m)| both.saturating_sub(m));
            if let Some(stat) = read(&dir.join("memory.stat")) {
                let s = parse_flat_keyed(&stat);
                let inactive = s.get("total_inactive_file").copied().unwrap_or(0);
                u.working_set = u.memory_usage.map(|m| m.saturating_sub(inactive));
                u.rss = s.get("total_rss").copied();
                u.page_faults = s.get("total_pgfault").copied();
                u.major_page_faults = s.get("total_pgmajfault").copied();
            }
        }
        if u.cpu_ns.is_some() || u.memory_usage.is_some() {
            return u;
        }
    }
    let Some(path) = &paths.unified else {
        return u;
    };
    let base = if pure_v2 {
        root.to_path_buf()
    } else {
        root.join("unified")
    };
    let dir = base.join(path.trim_start_matches('/'));
    if let Some(stat) = read(&dir.join("cpu.stat")) {
        u.cpu_ns = parse_flat_keyed(&stat)
            .get("usage_usec")
            .map(|us| us * 1000);
    }
    u.memory_usage = number(read(&dir.join("memory.current")));
    u.memory_limit = number(read(&dir.join("memory.max")));
    u.swap_usage = number(read(&dir.join("memory.swap.current")));
    u.swap_limit = number(read(&dir.join("memory.swap.max")));
    if let Some(stat) = read(&dir.join("memory.stat")) {
        let s = parse_flat_keyed(&stat);
        let inactive = s.get("inactive_file").copied().unwrap_or(0);
        u.working_set = u.memory_usage.map(|m| m.saturating_sub(inactive));
        u.rss = s.get("anon").copied();
        u.page_faults = s.get("pgfault").copied();
        u.major_page_faults = s.get("pgmajfault").copied();
    }
    u
}

/// The cgroups one level up from `paths` (for a pause process: its pod's cgroup parent); a
/// hierarchy where `paths` is the root has none.
pub fn parents(paths: &ProcCgroups) -> ProcCgroups {
    let up = |p: &String| {
        Path::new(p)
            .parent()
            .map(|q| q.to_string_lossy().into_owned())
    };
    ProcCgroups {
        v1: paths
            .v1
            .iter()
            .filter_map(|(c, p)| Some((c.clone(), up(p)?)))
            .collect(),
        unified: paths.unified.as_ref().and_then(up),
    }
}

/// Processes in the cgroup of `paths` (v1 pids controller, else the unified hierarchy).
pub fn process_count(root: &Path, paths: &ProcCgroups) -> Option<u64> {
    let dir = if is_unified(root) {
        root.join(paths.unified.as_ref()?.trim_start_matches('/'))
    } else {
        v1_dir(root, "pids", paths.v1.get("pids")?)?
    };
    let procs = read(&dir.join("cgroup.procs"))?;
    Some(procs.lines().filter(|l| !l.trim().is_empty()).count() as u64)
}

/// One line of a `*.pressure` file: `some avg10=0.12 avg60=0.05 avg300=0.01 total=1234`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct PsiLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    /// Microseconds, as the kernel counts them.
    pub total_us: u64,
}

/// A `*.pressure` file: `some` tasks stalled, and (not for cpu on old kernels) `full`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Psi {
    pub some: Option<PsiLine>,
    pub full: Option<PsiLine>,
}

/// The PSI of a cgroup; a file the host does not have (no PSI, `psi=0`, a cgroup v1 process)
/// is None.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Pressure {
    pub cpu: Option<Psi>,
    pub memory: Option<Psi>,
    pub io: Option<Psi>,
}

/// Parses a `*.pressure` file; None when it has neither line.
pub fn parse_psi(text: &str) -> Option<Psi> {
    let mut psi = Psi::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let slot = match words.next() {
            Some("some") => &mut psi.some,
            Some("full") => &mut psi.full,
            _ => continue,
        };
        let mut l = PsiLine::default();
        let mut seen = 0;
        for word in words {
            let Some((k, v)) = word.split_once('=') else {
                continue;
            };
            let ok = match k {
                "avg10" => v.parse().map(|x| l.avg10 = x).is_ok(),
                "avg60" => v.parse().map(|x| l.avg60 = x).is_ok(),
                "avg300" => v.parse().map(|x| l.avg300 = x).is_ok(),
                "total" => v.parse().map(|x| l.total_us = x).is_ok(),
                _ => false,
            };
            seen += usize::from(ok);
        }
        if seen == 4 {
            *slot = Some(l);
        }
    }
    (psi.some.is_some() || psi.full.is_some()).then_some(psi)
}

/// The cgroup v2 directory of the process whose cgroups are `paths`, when it is the process's
/// own: always on a unified host; on a hybrid one only when the process sits at the same
/// path in the unified hierarchy as in the v1 ones (runc joins it there; otherwise the
/// unified path is some ancestor's, whose pressure is not the container's).
pub fn unified_dir(root: &Path, paths: &ProcCgroups) -> Option<PathBuf> {
    let path = paths.unified.as_deref()?;
    if is_unified(root) {
        return Some(root.join(path.trim_start_matches('/')));
    }
    let own = path != "/"
        && ["memory", "cpu", "cpuacct", "pids"]
            .iter()
            .any(|c| paths.v1.get(*c).map(String::as_str) == Some(path));
    own.then(|| root.join("unified").join(path.trim_start_matches('/')))
}

/// The PSI files of cgroup v2 directory `dir`.
pub fn read_pressure(dir: &Path) -> Pressure {
    let psi = |name: &str| read(&dir.join(name)).as_deref().and_then(parse_psi);
    Pressure {
        cpu: psi("cpu.pressure"),
        memory: psi("memory.pressure"),
        io: psi("io.pressure"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("peapod-cg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn parses_proc_cgroup_of_hybrid_and_v2_hosts() {
        let hybrid = "12:pids:/peapod/c1\n7:cpu:/peapod/c1\n6:cpuacct:/peapod/c1\n4:memory:/peapod/c1\n1:name=systemd:/x\n0::/\n";
        let p = ProcCgroups::parse(hybrid);
        assert_eq!(p.v1["cpuacct"], "/peapod/c1");
        assert_eq!(p.v1["memory"], "/peapod/c1");
        assert_eq!(p.unified.as_deref(), Some("/"));
        let combined = ProcCgroups::parse("3:cpu,cpuacct:/k/p\n");
        assert_eq!(combined.v1["cpu"], "/k/p");
        assert_eq!(combined.v1["cpuacct"], "/k/p");
        let v2 = ProcCgroups::parse("0::/kubepods.slice/x.scope\n");
        assert!(v2.v1.is_empty());
        assert_eq!(v2.unified.as_deref(), Some("/kubepods.slice/x.scope"));
    }

    #[test]
    fn reads_v1_figures_with_working_set_and_no_limit() {
        let root = tmp("v1");
        write(&root, "cpuacct/peapod/c1/cpuacct.usage", "123456789\n");
        write(
            &root,
            "memory/peapod/c1/memory.usage_in_bytes",
            "10485760\n",
        );
        write(
            &root,
            "memory/peapod/c1/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        write(
            &root,
            "memory/peapod/c1/memory.stat",
            "cache 100\nrss 50\ntotal_rss 4096\ntotal_inactive_file 1048576\ntotal_pgfault 77\ntotal_pgmajfault 3\n",
        );
        write(&root, "pids/peapod/c1/cgroup.procs", "10\n11\n");
        // Swap accounted: memsw is memory and swap together; its limit unlimited too.
        let memsw = "memory/peapod/c1/memory.memsw.usage_in_bytes";
        write(&root, memsw, "10489856\n");
        let memsw_limit = "memory/peapod/c1/memory.memsw.limit_in_bytes";
        write(&root, memsw_limit, "9223372036854771712\n");
        let paths =
            ProcCgroups::parse("6:cpuacct:/peapod/c1\n4:memory:/peapod/c1\n12:pids:/peapod/c1\n");
        let u = read_usage(&root, &paths);
        assert_eq!((u.swap_usage, u.swap_limit), (Some(4096), None));
        assert_eq!(u.cpu_ns, Some(123_456_789));
        assert_eq!(u.memory_usage, Some(10 << 20));
        assert_eq!(u.working_set, Some(9 << 20));
        assert_eq!(u.rss, Some(4096));
        assert_eq!((u.page_faults, u.major_page_faults), (Some(77), Some(3)));
        assert_eq!(u.memory_limit, None);
        assert_eq!(process_count(&root, &paths), Some(2));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn reads_v2_figures() {
        let root = tmp("v2");
        write(&root, "cgroup.controllers", "cpu memory pids\n");
        write(
            &root,
            "k/c2/cpu.stat",
            "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n",
        );
        write(&root, "k/c2/memory.current", "8192\n");
        write(&root, "k/c2/memory.max", "65536\n");
        write(
            &root,
            "k/c2/memory.stat",
            "anon 4096\nfile 4096\ninactive_file 1024\npgfault 9\npgmajfault 1\n",
        );
        write(&root, "k/c2/cgroup.procs", "1\n");
        write(&root, "k/c2/memory.swap.current", "512\n");
        write(&root, "k/c2/memory.swap.max", "2048\n");
        let paths = ProcCgroups::parse("0::/k/c2\n");
        let u = read_usage(&root, &paths);
        assert_eq!((u.swap_usage, u.swap_limit), (Some(512), Some(2048)));
        assert_eq!(u.cpu_ns, Some(2_500_000));
        assert_eq!(u.memory_usage, Some(8192));
        assert_eq!(u.working_set, Some(7168));
        assert_eq!(u.rss, Some(4096));
        assert_eq!(u.memory_limit, Some(65536));
        assert_eq!(process_count(&root, &paths), Some(1));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn pod_totals_add_what_is_known_and_drop_limits() {
        let mut total = Usage {
            memory_limit: Some(100),
            ..Default::default()
        };
        total.add(&Usage {
            cpu_ns: Some(5),
            working_set: Some(10),
            ..Default::default()
        });
        total.add(&Usage {
            cpu_ns: Some(7),
            memory_usage: Some(3),
            ..Default::default()
        });
        assert_eq!(total.cpu_ns, Some(12));
        assert_eq!(total.working_set, Some(10));
        assert_eq!(total.memory_usage, Some(3));
        assert_eq!(total.rss, None);
        assert_eq!(total.memory_limit, None);
    }

    #[test]
    fn parses_pressure_files() {
        let cpu = "some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n";
        let psi = parse_psi(cpu).unwrap();
        assert_eq!(
            psi.some,
            Some(PsiLine {
                avg10: 1.5,
                avg60: 0.25,
                avg300: 0.0,
                total_us: 123_456
            })
        );
        assert_eq!(psi.full.map(|l| l.total_us), Some(7));
        // Kernels before 5.13 have no `full` line for cpu.
        let old = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert!(old.some.is_some() && old.full.is_none());
        assert_eq!(parse_psi(""), None);
        assert_eq!(parse_psi("some avg10=x avg60=0 avg300=0 total=0\n"), None);
    }

    #[test]
    fn pressure_of_a_v2_cgroup_and_only_of_its_own_on_hybrid() {
        let v2 = tmp("psi-v2");
        write(&v2, "cgroup.controllers", "cpu memory io\n");
        write(
            &v2,
            "k/c/cpu.pressure",
            "some avg10=2.00 avg60=1.00 avg300=0.50 total=9\n",
        );
        write(
            &v2,
            "k/c/io.pressure",
            "some avg10=0 avg60=0 avg300=0 total=1\nfull avg10=0 avg60=0 avg300=0 total=2\n",
        );
        let dir = unified_dir(&v2, &ProcCgroups::parse("0::/k/c\n")).unwrap();
        let p = read_pressure(&dir);
        assert_eq!(p.cpu.and_then(|c| c.some).map(|l| l.avg10), Some(2.0));
        assert_eq!(p.memory, None);
        assert_eq!(p.io.and_then(|c| c.full).map(|l| l.total_us), Some(2));
        std::fs::remove_dir_all(&v2).unwrap();

        let hybrid = tmp("psi-hybrid");
        std::fs::create_dir_all(hybrid.join("memory")).unwrap();
        std::fs::create_dir_all(hybrid.join("unified")).unwrap();
        // runc joined the unified hierarchy at the container's path.
        let joined = ProcCgroups::parse("4:memory:/p/c1\n1:cpu:/p/c1\n0::/p/c1\n");
        assert_eq!(
            unified_dir(&hybrid, &joined),
            Some(hybrid.join("unified/p/c1"))
        );
        // The unified path is not the container's: no pressure of someone else's.
        let root = ProcCgroups::parse("4:memory:/p/c1\n0::/\n");
        assert_eq!(unified_dir(&hybrid, &root), None);
        let other = ProcCgroups::parse("4:memory:/p/c1\n0::/user.slice\n");
        assert_eq!(unified_dir(&hybrid, &other), None);
        std::fs::remove_dir_all(&hybrid).unwrap();
    }

    #[test]
    fn parents_are_one_level_up_and_the_root_has_none() {
        let p = ProcCgroups::parse(
            "4:memory:/kubepods/burstable/podu/abc\n2:cpu,cpuacct:/kubepods/burstable/podu/abc\n1:pids:/\n0::/\n",
        );
        let up = parents(&p);
        assert_eq!(up.v1["memory"], "/kubepods/burstable/podu");
        assert_eq!(up.v1["cpuacct"], "/kubepods/burstable/podu");
        assert!(!up.v1.contains_key("pids"));
        assert_eq!(up.unified, None);
    }

    #[test]
    fn v2_max_means_unlimited() {
        let root = tmp("v2max");
        write(&root, "cgroup.controllers", "memory\n");
        write(&root, "c/memory.max", "max\n");
        let u = read_usage(&root, &ProcCgroups::parse("0::/c\n"));
        assert_eq!(u.memory_limit, None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
