//! A container's processes as `/proc` shows them, and which of them are an exec session's.
//!
//! A container is the pid namespace (`/proc/<pid>/ns/pid`) and the cgroups
//! (`/proc/<pid>/cgroup`) of its init process: an exec joins both (runc `setns` and
//! `cgroup.procs`), but its parent is outside the container (the shim, or `runc exec`
//! while it starts), while every other process of the container descends from the init.
//! A process is named by its pid and start time (`/proc/<pid>/stat` field 22, clock ticks
//! since boot), which survive `execve` and tell a reused pid apart.
//!
//! Everything here reads files: callers run it in `spawn_blocking`.

// Blocking reads of /proc: every caller runs them in `spawn_blocking` (exec_reaper::session).
#![allow(clippy::disallowed_methods)]

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::PathBuf;

/// A process, across pid reuse: its pid and start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ProcessId {
    /// The pid (in the kubelet's pid namespace).
    pub(crate) pid: i32,
    /// `/proc/<pid>/stat` `starttime`.
    pub(crate) start: u64,
}

/// What the reaper reads of one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Process {
    /// The process.
    pub(crate) id: ProcessId,
    /// Its parent's pid.
    pub(crate) ppid: i32,
    /// Its process group.
    pub(crate) pgrp: i32,
    /// Its arguments (`/proc/<pid>/cmdline`).
    pub(crate) cmdline: Vec<String>,
}

/// The fields of `/proc/<pid>/stat` the reaper uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    ppid: i32,
    pgrp: i32,
    start: u64,
}

/// Parses `/proc/<pid>/stat`: after the command name (in parentheses, which may hold any
/// byte, hence the last `)`), field 3 is the state, 4 the parent, 5 the group, 22 the
/// start time.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// `/proc/<pid>/cmdline`: NUL-terminated arguments.
fn parse_cmdline(bytes: &[u8]) -> Vec<String> {
    let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    if bytes.is_empty() {
        return Vec::new();
    }
    bytes
        .split(|b| *b == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

/// The identity of a container: its init's pid namespace and cgroups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Container {
    /// `/proc/<init>/ns/pid`'s target, e.g. `pid:[4026532281]`.
    pid_ns: PathBuf,
    /// `/proc/<init>/cgroup`.
    cgroup: String,
}

/// A `/proc` (the real one, or a directory laid out like it in tests).
#[derive(Clone, Debug)]
pub(crate) struct Procfs {
    root: PathBuf,
}

impl Default for Procfs {
    fn default() -> Self {
        Self::new("/proc")
    }
}

impl Procfs {
    /// The `/proc` at `root`.
    pub(crate) fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn path(&self, pid: i32, file: &str) -> PathBuf {
        self.root.join(pid.to_string()).join(file)
    }

    fn stat(&self, pid: i32) -> io::Result<Stat> {
        let text = std::fs::read_to_string(self.path(pid, "stat"))?;
        parse_stat(&text).ok_or_else(|| io::Error::other(format!("unparsable stat of {pid}")))
    }

    fn pid_ns(&self, pid: i32) -> io::Result<PathBuf> {
        std::fs::read_link(self.path(pid, "ns/pid"))
    }

    fn cgroup(&self, pid: i32) -> io::Result<String> {
        std::fs::read_to_string(self.path(pid, "cgroup"))
    }

    /// The container whose init process is `init`.
    pub(crate) fn container(&self, init: i32) -> io::Result<Container> {
        Ok(Container {
            pid_ns: self.pid_ns(init)?,
            cgroup: self.cgroup(init)?,
        })
    }

    fn pids(&self) -> io::Result<Vec<i32>> {
        Ok(std::fs::read_dir(&self.root)?
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect())
    }

    /// Every process of `container` now (processes that end while they are read are left
    /// out).
    pub(crate) fn processes(&self, container: &Container) -> io::Result<Vec<Process>> {
        let mut processes = Vec::new();
        for pid in self.pids()? {
            if self.pid_ns(pid).ok().as_ref() != Some(&container.pid_ns)
                || self.cgroup(pid).ok().as_ref() != Some(&container.cgroup)
            {
                continue;
            }
            let (Ok(stat), Ok(cmdline)) =
                (self.stat(pid), std::fs::read(self.path(pid, "cmdline")))
            else {
                continue;
            };
            processes.push(Process {
                id: ProcessId {
                    pid,
                    start: stat.start,
                },
                ppid: stat.ppid,
                pgrp: stat.pgrp,
                cmdline: parse_cmdline(&cmdline),
            });
        }
        Ok(processes)
    }
}

/// The processes of an exec of `cmd` that started after `before` was taken: not in
/// `before`, running `cmd`, with a parent outside the container (an exec is the shim's
/// child; what the container's processes start is theirs).
pub(crate) fn exec_processes(
    processes: &[Process],
    before: &HashSet<ProcessId>,
    cmd: &[String],
) -> Vec<ProcessId> {
    let members: HashSet<i32> = processes.iter().map(|p| p.id.pid).collect();
    processes
        .iter()
        .filter(|p| !before.contains(&p.id) && p.cmdline == cmd && !members.contains(&p.ppid))
        .map(|p| p.id)
        .collect()
}

/// What killing `roots` means among `processes`: every process of their trees that still
/// runs (a root whose pid now names another process is not one of them), and the process
/// groups the live roots lead (a terminal exec is a session and group leader; a group a
/// root does not lead may hold the runtime's own processes and is left alone).
pub(crate) fn kill_targets(
    processes: &[Process],
    roots: &[ProcessId],
) -> (Vec<ProcessId>, Vec<i32>) {
    let mut children: HashMap<i32, Vec<&Process>> = HashMap::new();
    for p in processes {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut targets = Vec::new();
    let mut groups = Vec::new();
    let mut queue: Vec<&Process> = processes
        .iter()
        .filter(|p| roots.contains(&p.id))
        .inspect(|root| {
            if root.pgrp == root.id.pid {
                groups.push(root.pgrp);
            }
        })
        .collect();
    while let Some(p) = queue.pop() {
        if targets.contains(&p.id) {
            continue;
        }
        targets.push(p.id);
        queue.extend(children.get(&p.id.pid).into_iter().flatten());
    }
    (targets, groups)
}

#[cfg(test)]
pub(super) mod fake {
    //! A directory laid out like `/proc`.

    use std::path::Path;

    /// A fake `/proc` entry.
    pub(crate) struct Fake<'a> {
        pub(crate) pid: i32,
        pub(crate) ppid: i32,
        pub(crate) pgrp: i32,
        pub(crate) start: u64,
        pub(crate) ns: &'a str,
        pub(crate) cgroup: &'a str,
        pub(crate) cmdline: &'a [&'a str],
    }

    pub(crate) fn write(root: &Path, p: &Fake<'_>) {
        let dir = root.join(p.pid.to_string());
        std::fs::create_dir_all(dir.join("ns")).expect("dir");
        // Fields 1..=22 of stat, with a command name holding a space and a parenthesis.
        let stat = format!(
            "{} (odd) name) S {} {} {} 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 {} 1000 100",
            p.pid, p.ppid, p.pgrp, p.pgrp, p.start
        );
        std::fs::write(dir.join("stat"), stat).expect("stat");
        let mut cmdline = p.cmdline.join("\0");
        cmdline.push('\0');
        std::fs::write(dir.join("cmdline"), cmdline).expect("cmdline");
        std::fs::write(dir.join("cgroup"), p.cgroup).expect("cgroup");
        std::os::unix::fs::symlink(p.ns, dir.join("ns/pid")).expect("ns");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::fake::{Fake, write};

    const NS: &str = "pid:[4026532281]";
    const CG: &str = "0::/kubepods/pod1/ctr-a\n";

    /// A container `ctr-a` (init 100 under shim 90) with a child of its own (101), an
    /// older exec of `sleep 600` (200), a fresh exec of `sleep 600` (300) with a child (301),
    /// a fresh exec of `ls` (400); a process of the same pod's other container in the same
    /// pid namespace (500, shim's child, `sleep 600`); a host `sleep 600` (600).
    fn fixture() -> (tempfile::TempDir, Procfs) {
        let dir = tempfile::tempdir().expect("tempdir");
        let other_cg = "0::/kubepods/pod1/ctr-b\n";
        for p in [
            Fake {
                pid: 90,
                ppid: 1,
                pgrp: 90,
                start: 10,
                ns: "pid:[1]",
                cgroup: "0::/system\n",
                cmdline: &["shim"],
            },
            Fake {
                pid: 100,
                ppid: 90,
                pgrp: 100,
                start: 20,
                ns: NS,
                cgroup: CG,
                cmdline: &["sh", "-c", "sleep 600"],
            },
            Fake {
                pid: 101,
                ppid: 100,
                pgrp: 100,
                start: 21,
                ns: NS,
                cgroup: CG,
                cmdline: &["sleep", "600"],
            },
            Fake {
                pid: 200,
                ppid: 90,
                pgrp: 90,
                start: 30,
                ns: NS,
                cgroup: CG,
                cmdline: &["sleep", "600"],
            },
            Fake {
                pid: 300,
                ppid: 90,
                pgrp: 300,
                start: 40,
                ns: NS,
                cgroup: CG,
                cmdline: &["sleep", "600"],
            },
            Fake {
                pid: 301,
                ppid: 300,
                pgrp: 300,
                start: 41,
                ns: NS,
                cgroup: CG,
                cmdline: &["cat"],
            },
            Fake {
                pid: 400,
                ppid: 90,
                pgrp: 90,
                start: 42,
                ns: NS,
                cgroup: CG,
                cmdline: &["ls"],
            },
            Fake {
                pid: 500,
                ppid: 90,
                pgrp: 500,
                start: 43,
                ns: NS,
                cgroup: other_cg,
                cmdline: &["sleep", "600"],
            },
            Fake {
                pid: 600,
                ppid: 1,
                pgrp: 600,
                start: 44,
                ns: "pid:[1]",
                cgroup: "0::/user\n",
                cmdline: &["sleep", "600"],
            },
        ] {
            write(dir.path(), &p);
        }
        let procfs = Procfs::new(dir.path());
        (dir, procfs)
    }

    fn id(pid: i32, start: u64) -> ProcessId {
        ProcessId { pid, start }
    }

    fn cmd(args: &[&str]) -> Vec<String> {
        args.iter().map(|&a| a.to_owned()).collect()
    }

    #[test]
    fn stat_fields_follow_the_last_parenthesis() {
        let stat = parse_stat("7 (a) b) R 3 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0")
            .expect("parses");
        assert_eq!(
            stat,
            Stat {
                ppid: 3,
                pgrp: 7,
                start: 12345
            }
        );
        assert_eq!(parse_stat("7 (a) R 3"), None);
    }

    #[test]
    fn cmdlines_are_nul_terminated_arguments() {
        assert_eq!(parse_cmdline(b"sleep\x00600\x00"), cmd(&["sleep", "600"]));
        assert_eq!(parse_cmdline(b"sh\x00-c\x00\x00"), cmd(&["sh", "-c", ""]));
        assert_eq!(parse_cmdline(b""), Vec::<String>::new());
    }

    #[test]
    fn a_container_is_its_inits_pid_namespace_and_cgroups() {
        let (_dir, procfs) = fixture();
        let container = procfs.container(100).expect("init");
        let mut pids: Vec<i32> = procfs
            .processes(&container)
            .expect("scan")
            .iter()
            .map(|p| p.id.pid)
            .collect();
        pids.sort_unstable();
        assert_eq!(pids, [100, 101, 200, 300, 301, 400]);
    }

    #[test]
    fn an_exec_is_a_new_process_of_the_command_whose_parent_is_outside() {
        let (_dir, procfs) = fixture();
        let container = procfs.container(100).expect("init");
        let processes = procfs.processes(&container).expect("scan");
        // The session began after 200 and before 300.
        let before: HashSet<ProcessId> = [id(100, 20), id(101, 21), id(200, 30)].into();
        assert_eq!(
            exec_processes(&processes, &before, &cmd(&["sleep", "600"])),
            [id(300, 40)],
            "not the init's child (101), not the older exec (200), not the other container's \
             (500), not the host's (600)"
        );
        assert_eq!(
            exec_processes(&processes, &before, &cmd(&["ls"])),
            [id(400, 42)]
        );
        assert!(exec_processes(&processes, &before, &cmd(&["sleep"])).is_empty());
    }

    #[test]
    fn killing_an_exec_takes_its_tree_and_the_group_it_leads() {
        let (_dir, procfs) = fixture();
        let container = procfs.container(100).expect("init");
        let processes = procfs.processes(&container).expect("scan");
        let (mut targets, groups) = kill_targets(&processes, &[id(300, 40)]);
        targets.sort_unstable_by_key(|p| p.pid);
        assert_eq!(targets, [id(300, 40), id(301, 41)]);
        assert_eq!(groups, [300]);
        // An exec in the shim's group: the process, not the group.
        assert_eq!(
            kill_targets(&processes, &[id(400, 42)]),
            (vec![id(400, 42)], vec![])
        );
        // A pid that now names another process: nothing.
        assert_eq!(kill_targets(&processes, &[id(300, 39)]), (vec![], vec![]));
    }
}
