//! `cargo xtask idle-order`: lists the functions the idle release kubelet runs, for
//! `kubelet-bin/build.rs` to link next to each other (issue 17).
//!
//! The kernel maps an executable's code in 64 KiB pieces: around every page fault it maps the
//! neighbouring pages the page cache holds, and the page cache reads code in 64 KiB folios.
//! Once the idle kubelet has given its code pages back (kubelet-bin's `idle_trim`), the
//! functions its periodic loops run (about 1,100, 0.9 MiB) fault back in. Spread over the
//! 15 MiB `.text` as the linker lays it out by default, they touch about 100 such pieces:
//! 6.3 MiB resident. Listed first in `.text` they take about 12.
//!
//! The list comes from the release binary itself, not from an instrumented build: the
//! kubelet runs on a private containerd, a few pods come and go, and once it is idle, `gdb`
//! puts a one-shot breakpoint on every function of its symbol table and records which ones
//! are called within the window. Symbol names survive a rebuild unless the toolchain, a
//! dependency's version or a generic function's signature changes; names the binary no
//! longer defines are ignored at link time, and the bench reports how many are still found
//! (see [`listed_in`]). Rerun this after such a change.
//!
//! Needs `gdb`, `nm` and `strip` (binutils), which the bench itself does not.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use nix::{sys::signal, unistd::Pid};
use xtask::{project_root, target_dir, testbed};

use super::{
    agent::Agent,
    kubelet::{Dirs, Kubelet},
    scenario,
};

/// The list, relative to the project root; `kubelet-bin/build.rs` passes it to the linker.
pub(crate) const LIST: &str = "kubelet-bin/idle-functions.txt";

/// The gdb script that sets the breakpoints and records the first calls.
const FIRST_CALLS_PY: &str = include_str!("idle_order/first_calls.py");

/// Pods started and removed before the window, so that the paths idle runs once pods have
/// come and gone are listed too.
const CHURN_PODS: usize = 5;

/// Quiet before the window: the kubelet's idle trim runs after 10 s under 1 % of a core.
const SETTLE: Duration = Duration::from_secs(20);

/// Options of `cargo xtask idle-order`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Trace this release kubelet binary instead of building package kubelet-bin.
    #[arg(long)]
    kubelet: Option<PathBuf>,
    /// Seconds of idle to record. The kubelet's slowest idle loops (housekeeping, the
    /// eviction manager, the idle trim) run every 2-10 s, and each first call stops it for
    /// tens of milliseconds under gdb.
    #[arg(long, default_value_t = 90)]
    seconds: u64,
}

/// Writes [`LIST`] from one traced idle window of the release kubelet.
pub(crate) fn run(args: Args) -> Result<()> {
    for tool in ["gdb", "nm", "strip"] {
        which(tool)?;
    }
    testbed::ensure_packages()?;
    let (kubelet_bin, agent_bin) = super::build(args.kubelet, false, false, true)?;
    let functions = functions_of(&kubelet_bin)?;

    let work = target_dir().join("testbed").join("idle-order");
    let dirs = Dirs::fresh(&work)?;
    println!("==> starting a private containerd in {}", work.display());
    let testbed = testbed::Testbed::start(&work.join("containerd"))?;
    let endpoint = testbed.endpoint();
    println!("==> starting the kubelet ({})", kubelet_bin.display());
    let mut kubelet =
        Kubelet::start_with(&kubelet_bin, &endpoint, &dirs, scenario::NODE, &[], "info")?;
    let mut agent = Agent::spawn(&agent_bin, &endpoint, &dirs)?;
    println!("==> {CHURN_PODS} pods started and removed, then {SETTLE:?} of quiet");
    scenario::kubelet_start(
        &mut agent,
        &kubelet,
        &dirs.manifests,
        "idle-order",
        CHURN_PODS,
        || Ok(()),
    )?;
    thread::sleep(SETTLE);

    let window = Duration::from_secs(args.seconds);
    println!(
        "==> {} breakpoints, {window:?} of idle under gdb",
        functions.len()
    );
    let called = first_calls(kubelet.pid(), &kubelet_bin, &functions, window, &work)?;
    kubelet.check_alive()?;
    drop(agent);
    kubelet.stop();
    testbed.shutdown()?;

    let called: Vec<&Function> = called.iter().filter_map(|o| functions.get(o)).collect();
    let names: BTreeSet<&str> = called.iter().map(|f| f.name.as_str()).collect();
    let size: u64 = called.iter().map(|f| f.size).sum();
    let list = project_root().join(LIST);
    let mut text = format!(
        "# Functions the idle release kubelet runs, linked first in .text (kubelet-bin/build.rs).\n\
         # Written by `cargo xtask idle-order`; {} functions, {} KiB of code.\n",
        names.len(),
        size / 1024
    );
    for name in &names {
        text.push_str(name);
        text.push('\n');
    }
    fs::write(&list, text).with_context(|| format!("cannot write {}", list.display()))?;
    println!(
        "==> {} functions ({} KiB) written to {LIST}",
        names.len(),
        size / 1024
    );
    Ok(())
}

/// How many of the listed names `binary` defines, and how many are listed; `None` when the
/// project has no list. The names are looked up among the binary's NUL-terminated strings,
/// which include its symbol table.
pub(crate) fn listed_in(binary: &Path) -> Result<Option<(usize, usize)>> {
    let Ok(list) = fs::read_to_string(project_root().join(LIST)) else {
        return Ok(None);
    };
    let bytes = fs::read(binary).with_context(|| format!("cannot read {}", binary.display()))?;
    Ok(Some(count_found(&list, &bytes)))
}

/// The share of the list's names the release binary must still define (issue 32): below it
/// the link order has decayed (a toolchain, dependency or signature change renamed the
/// symbols) and resident idle code grows back unnoticed.
pub(crate) const MIN_FOUND_PERCENT: usize = 90;

/// Whether `found` of `listed` names are enough ([`MIN_FOUND_PERCENT`]).
pub(crate) fn list_is_fresh(found: usize, listed: usize) -> bool {
    found * 100 >= listed * MIN_FOUND_PERCENT
}

/// Fails the bench, after its report is written, when the list has decayed.
pub(crate) fn check_list(found: Option<(usize, usize)>) -> Result<()> {
    match found {
        Some((found, listed)) if !list_is_fresh(found, listed) => bail!(
            "the release binary defines only {found} of the {listed} functions {LIST} lists \
             (< {MIN_FOUND_PERCENT} %): regenerate it with `cargo xtask idle-order` and commit it"
        ),
        _ => Ok(()),
    }
}

/// How many names of `list` (one per line, `#` comments) are NUL-terminated strings of
/// `binary`, and how many it lists.
fn count_found(list: &str, binary: &[u8]) -> (usize, usize) {
    let listed: Vec<&str> = list
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let strings: HashSet<&[u8]> = binary.split(|b| *b == 0).collect();
    let found = listed
        .iter()
        .filter(|name| strings.contains(name.as_bytes()))
        .count();
    (found, listed.len())
}

/// A function of the binary.
#[derive(Debug)]
struct Function {
    /// Its (mangled) symbol name.
    name: String,
    /// Its code size in bytes.
    size: u64,
}

/// The binary's functions by offset (address in the file's layout).
type Functions = HashMap<u64, Function>;

/// The binary's functions, from `nm`.
fn functions_of(binary: &Path) -> Result<Functions> {
    let out = Command::new("nm")
        .args(["--defined-only", "--print-size"])
        .arg(binary)
        .output()
        .context("cannot run nm")?;
    if !out.status.success() {
        bail!("nm {} failed: {}", binary.display(), out.status);
    }
    let functions = parse_nm(&String::from_utf8_lossy(&out.stdout))?;
    if functions.is_empty() {
        bail!("{} has no symbol table (stripped?)", binary.display());
    }
    Ok(functions)
}

/// The text symbols with a size in `nm --print-size` output (`address size kind name`); the
/// first name at each address.
fn parse_nm(output: &str) -> Result<Functions> {
    let mut functions = Functions::new();
    for line in output.lines() {
        let mut fields = line.splitn(4, ' ');
        let (Some(address), Some(size), Some(kind), Some(name)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if kind == "t" || kind == "T" {
            let address = u64::from_str_radix(address, 16)
                .with_context(|| format!("nm: bad address in {line:?}"))?;
            let size = u64::from_str_radix(size, 16)
                .with_context(|| format!("nm: bad size in {line:?}"))?;
            functions.entry(address).or_insert_with(|| Function {
                name: name.to_owned(),
                size,
            });
        }
    }
    Ok(functions)
}

/// The offsets of the functions `pid` calls within `window`, each once, in the order first
/// called.
fn first_calls(
    pid: u32,
    binary: &Path,
    functions: &Functions,
    window: Duration,
    work: &Path,
) -> Result<Vec<u64>> {
    let base = load_base(pid, binary)?;
    let addrs = work.join("idle-order.addrs");
    let hits = work.join("idle-order.hits");
    let script = work.join("first_calls.py");
    // gdb reads the symbols of the file it is given: a stripped copy keeps each stop short.
    let stripped = work.join("kubelet.stripped");
    let text: String = functions
        .keys()
        .map(|offset| format!("{:x}\n", base + offset))
        .collect();
    fs::write(&addrs, text)?;
    fs::write(&script, FIRST_CALLS_PY)?;
    let status = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(binary)
        .status()?;
    if !status.success() {
        bail!("strip {} failed: {status}", binary.display());
    }
    let out = Command::new("gdb")
        .args(["-q", "-batch", "-p", &pid.to_string(), "-x"])
        .arg(&script)
        .arg(&stripped)
        .env("ADDRS", &addrs)
        .env("OUT", &hits)
        .env("SECS", window.as_secs().to_string())
        .output()
        .context("cannot run gdb")?;
    // The window ends with a SIGSTOP to interrupt gdb's `continue`.
    signal::kill(Pid::from_raw(i32::try_from(pid)?), signal::Signal::SIGCONT)?;
    let recorded = fs::read_to_string(&hits).with_context(|| {
        format!(
            "gdb recorded nothing ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let mut seen = HashSet::new();
    let mut called = Vec::new();
    for line in recorded.lines() {
        let offset = u64::from_str_radix(line.trim(), 16)? - base;
        if seen.insert(offset) {
            called.push(offset);
        }
    }
    Ok(called)
}

/// Where `binary` is loaded in `pid`: the start of its mapping at file offset 0.
fn load_base(pid: u32, binary: &Path) -> Result<u64> {
    let exe = fs::read_link(format!("/proc/{pid}/exe"))?;
    let wanted = fs::canonicalize(binary)?;
    if exe != wanted {
        bail!("pid {pid} runs {}, not {}", exe.display(), wanted.display());
    }
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))?;
    mapping_start(&maps, &exe)
        .with_context(|| format!("no mapping of {} at offset 0 in pid {pid}", exe.display()))
}

/// The start address of `exe`'s mapping at file offset 0 in a `/proc/PID/maps` text.
fn mapping_start(maps: &str, exe: &Path) -> Option<u64> {
    maps.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields[..] {
            [range, _perms, "00000000", _dev, _inode, path] if Path::new(path) == exe => {
                u64::from_str_radix(range.split_once('-')?.0, 16).ok()
            }
            _ => None,
        }
    })
}

/// Fails naming `tool` unless it is on `PATH`.
fn which(tool: &str) -> Result<()> {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        bail!("`cargo xtask idle-order` needs {tool} (apt-get install gdb binutils)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_with_under_90_percent_of_its_names_found_fails_the_bench() {
        assert!(check_list(None).is_ok(), "no list");
        assert!(check_list(Some((1_164, 1_164))).is_ok());
        assert!(check_list(Some((90, 100))).is_ok());
        let stale = check_list(Some((89, 100))).expect_err("decayed");
        assert!(
            stale.to_string().contains("cargo xtask idle-order"),
            "{stale}"
        );
    }

    #[test]
    fn nm_output_gives_text_symbols_with_their_sizes_first_name_per_address() {
        let output = "\
0000000000001000 0000000000000040 T main
0000000000001000 0000000000000040 t main_alias
0000000000002000 0000000000000010 t _ZN4core3fmt5write17h0123456789abcdefE
0000000000003000 0000000000000008 D some_data
0000000000004000 W weak_without_size
";
        let functions = parse_nm(output).expect("parses");
        let names: BTreeSet<(u64, &str, u64)> = functions
            .iter()
            .map(|(address, f)| (*address, f.name.as_str(), f.size))
            .collect();
        assert_eq!(
            names,
            BTreeSet::from([
                (0x1000, "main", 0x40),
                (0x2000, "_ZN4core3fmt5write17h0123456789abcdefE", 0x10),
            ])
        );
    }

    #[test]
    fn a_bad_nm_line_is_an_error_that_quotes_it() {
        let err = parse_nm("zz 10 T f\n").expect_err("bad address");
        assert!(format!("{err:#}").contains("\"zz 10 T f\""), "{err:#}");
    }

    #[test]
    fn listed_names_are_counted_only_when_whole_strings_of_the_binary() {
        let list = "# comment\n_ZN3foo3bar\n\n_ZN3foo3baz\n_ZN3gone\n";
        let binary = b"\x7fELF\0_ZN3foo3bar\0x_ZN3foo3baz\0_ZN3gone.1\0";
        assert_eq!(count_found(list, binary), (1, 3));
    }

    #[test]
    fn the_load_base_is_the_executable_s_mapping_at_offset_zero() {
        let maps = "\
7f0000000000-7f0000001000 r--p 00000000 fe:00 12 /usr/lib/libc.so.6
559783d1f000-559784111000 r--p 00000000 fe:00 99 /opt/kubelet
559784111000-559784fef000 r-xp 003f1000 fe:00 99 /opt/kubelet
";
        assert_eq!(
            mapping_start(maps, Path::new("/opt/kubelet")),
            Some(0x5597_83d1_f000)
        );
        assert_eq!(mapping_start(maps, Path::new("/opt/other")), None);
    }
}
