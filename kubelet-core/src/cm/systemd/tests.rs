use std::path::Path;
use std::sync::Mutex;

use super::*;
use crate::cm::cgroup_name::expand_slice;
use crate::cm::helpers::burstable_cpu_shares;
use crate::testing::container_with_resources as container;
use crate::testing::pod;

/// What the fake systemd was asked, in order.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Start(String, Vec<UnitProperty>),
    Set(String, Vec<UnitProperty>),
    Stop(String),
}

/// A systemd that creates and removes a slice's directories in the hierarchies it manages
/// (`cpu` and `memory` here; `cpuset` is left to the kubelet, as systemd does on v1).
struct FakeUnits {
    root: PathBuf,
    calls: Mutex<Vec<Call>>,
    version: Option<u32>,
}

impl FakeUnits {
    fn calls(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().expect("lock"))
    }
    fn record(&self, c: Call) {
        self.calls.lock().expect("lock").push(c);
    }
}

impl SystemdUnits for FakeUnits {
    fn start_transient_unit(&self, name: &str, properties: &[UnitProperty]) -> Result<()> {
        self.record(Call::Start(name.into(), properties.to_vec()));
        let path = expand_slice(name).expect("a slice");
        for c in ["cpu", "memory"] {
            std::fs::create_dir_all(self.root.join(c).join(path.trim_start_matches('/')))
                .expect("mkdir");
        }
        Ok(())
    }
    fn set_unit_properties(&self, name: &str, properties: &[UnitProperty]) -> Result<()> {
        self.record(Call::Set(name.into(), properties.to_vec()));
        Ok(())
    }
    fn stop_unit(&self, name: &str) -> Result<()> {
        self.record(Call::Stop(name.into()));
        let path = expand_slice(name).expect("a slice");
        for c in ["cpu", "memory"] {
            let _ = std::fs::remove_dir_all(self.root.join(c).join(path.trim_start_matches('/')));
        }
        Ok(())
    }
    fn version(&self) -> Option<u32> {
        self.version
    }
}

fn setup(dir: &Path, version: Option<u32>) -> (Systemd, Arc<FakeUnits>) {
    let list = ["cpu", "cpuset", "memory"]
        .iter()
        .map(|c| ((*c).to_owned(), dir.join(c)))
        .collect();
    for c in ["cpu", "cpuset", "memory"] {
        std::fs::create_dir_all(dir.join(c)).expect("mkdir");
    }
    std::fs::write(dir.join("cpuset/cpuset.cpus"), "0-1\n").expect("cpus");
    std::fs::write(dir.join("cpuset/cpuset.mems"), "0\n").expect("mems");
    let units = Arc::new(FakeUnits {
        root: dir.to_path_buf(),
        calls: Mutex::default(),
        version,
    });
    (Systemd::new(Layout::V1(list), "/", units.clone()), units)
}

fn remove_files(dir: &Path) {
    for e in std::fs::read_dir(dir).expect("read").flatten() {
        if e.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::remove_file(e.path()).expect("rm");
        }
    }
}

fn read(p: PathBuf) -> String {
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn start_props(unit: &str, parent: &str) -> Vec<UnitProperty> {
    vec![
        UnitProperty {
            name: "Description",
            value: PropertyValue::Str(format!("libcontainer container {unit}")),
        },
        UnitProperty {
            name: "Wants",
            value: PropertyValue::Strings(vec![parent.into()]),
        },
        UnitProperty::bool("MemoryAccounting", true),
        UnitProperty::bool("CPUAccounting", true),
        UnitProperty::bool("BlockIOAccounting", true),
        UnitProperty::bool("TasksAccounting", true),
        UnitProperty::bool("DefaultDependencies", false),
    ]
}

#[test]
fn qos_slices_and_pod_lifecycle() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let (cg, units) = setup(d, Some(252));
    cg.setup_qos().expect("qos");
    let mut besteffort = start_props("kubepods-besteffort.slice", "kubepods.slice");
    besteffort.push(UnitProperty::u64("CPUShares", 2));
    assert_eq!(
        units.calls(),
        [
            Call::Start(
                "kubepods.slice".into(),
                start_props("kubepods.slice", "-.slice")
            ),
            Call::Start(
                "kubepods-burstable.slice".into(),
                start_props("kubepods-burstable.slice", "kubepods.slice")
            ),
            Call::Start("kubepods-besteffort.slice".into(), besteffort),
        ]
    );
    // The cpuset directory systemd leaves alone, with the parent's CPUs.
    assert_eq!(
        read(d.join("cpuset/kubepods.slice/kubepods-burstable.slice/cpuset.cpus")),
        "0-1"
    );
    assert_eq!(
        read(d.join("cpu/kubepods.slice/kubepods-besteffort.slice/cpu.shares")),
        "2"
    );

    let mut guaranteed = pod("g");
    guaranteed.spec.as_mut().expect("spec").containers =
        vec![container("a", &[], &[("cpu", "250m"), ("memory", "64Mi")])];
    assert_eq!(
        cg.pod_cgroup_parent(&guaranteed),
        "/kubepods.slice/kubepods-poduid_g.slice"
    );
    assert!(!cg.pod_cgroup_exists(&guaranteed));
    cg.ensure_exists(&guaranteed).expect("create");
    let mut expected = start_props("kubepods-poduid_g.slice", "kubepods.slice");
    expected.extend([
        UnitProperty::u64("MemoryLimit", 64 << 20),
        UnitProperty::u64("CPUShares", 256),
        UnitProperty::u64("CPUQuotaPeriodUSec", 100_000),
        UnitProperty::u64("CPUQuotaPerSecUSec", 250_000),
    ]);
    assert_eq!(
        units.calls(),
        [Call::Start("kubepods-poduid_g.slice".into(), expected)]
    );
    let g = |c: &str, f: &str| {
        read(
            d.join(c)
                .join("kubepods.slice/kubepods-poduid_g.slice")
                .join(f),
        )
    };
    assert_eq!(g("cpu", "cpu.cfs_quota_us"), "25000");
    assert_eq!(g("cpuset", "cpuset.mems"), "0");
    assert!(cg.pod_cgroup_exists(&guaranteed));
    cg.ensure_exists(&guaranteed).expect("exists");
    assert_eq!(units.calls(), [], "an existing slice is left alone");

    let mut burstable = pod("b");
    burstable.spec.as_mut().expect("spec").containers =
        vec![container("a", &[("cpu", "100m")], &[])];
    cg.ensure_exists(&burstable).expect("create");
    assert_eq!(
        cg.pod_cgroup_parent(&burstable),
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_b.slice"
    );
    let mut expected = start_props(
        "kubepods-burstable-poduid_b.slice",
        "kubepods-burstable.slice",
    );
    expected.push(UnitProperty::u64("CPUShares", 102));
    assert_eq!(
        units.calls(),
        [Call::Start(
            "kubepods-burstable-poduid_b.slice".into(),
            expected
        )]
    );

    let mut uids = cg.pod_cgroups().expect("list");
    uids.sort();
    assert_eq!(uids, [PodUid::from("uid-b"), PodUid::from("uid-g")]);

    cg.update_qos_cgroups(burstable_cpu_shares([&burstable, &guaranteed]))
        .expect("qos update");
    assert_eq!(
        units.calls(),
        [
            Call::Set(
                "kubepods-burstable.slice".into(),
                vec![UnitProperty::u64("CPUShares", 102)]
            ),
            Call::Set(
                "kubepods-besteffort.slice".into(),
                vec![UnitProperty::u64("CPUShares", 2)]
            ),
        ]
    );
    assert_eq!(
        read(d.join("cpu/kubepods.slice/kubepods-burstable.slice/cpu.shares")),
        "102"
    );

    // On a real cgroupfs the control files go with the directory; here they are files.
    for c in ["cpu", "cpuset", "memory"] {
        remove_files(
            &d.join(c)
                .join("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_b.slice"),
        );
    }
    cg.destroy(&PodUid::from("uid-b")).expect("destroy");
    assert_eq!(
        units.calls(),
        [Call::Stop("kubepods-burstable-poduid_b.slice".into())]
    );
    assert!(
        !d.join("cpuset/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_b.slice")
            .exists(),
        "what systemd does not manage is removed too"
    );
    assert_eq!(cg.pod_cgroups().expect("list"), [PodUid::from("uid-g")]);
    cg.destroy(&PodUid::from("uid-b")).expect("absent is fine");
    assert_eq!(units.calls(), [], "nothing to stop");
}

// runc addCpuQuota: rounding to whole percents, the period only from systemd 242 on, and
// an unlimited quota as USEC_INFINITY.
#[test]
fn cpu_quota_properties() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (cg, _) = setup(tmp.path(), Some(252));
    let config = ResourceConfig {
        cpu_quota: Some(1234),
        cpu_period: Some(100_000),
        ..Default::default()
    };
    assert_eq!(
        cg.resource_properties(&config),
        [
            UnitProperty::u64("CPUQuotaPeriodUSec", 100_000),
            UnitProperty::u64("CPUQuotaPerSecUSec", 20_000),
        ]
    );
    let unlimited = ResourceConfig {
        cpu_quota: Some(-1),
        cpu_period: Some(50_000),
        ..Default::default()
    };
    let (old, _) = setup(tmp.path(), Some(241));
    assert_eq!(
        old.resource_properties(&unlimited),
        [UnitProperty::u64("CPUQuotaPerSecUSec", USEC_INFINITY)]
    );
    assert_eq!(cg.resource_properties(&ResourceConfig::default()), []);
    let v2 = Systemd::new(
        Layout::V2(tmp.path().into()),
        "/",
        Arc::new(FakeUnits {
            root: tmp.path().into(),
            calls: Mutex::default(),
            version: None,
        }),
    );
    assert_eq!(
        v2.resource_properties(&ResourceConfig {
            cpu_shares: Some(1024),
            memory: Some(1 << 30),
            ..Default::default()
        }),
        [
            UnitProperty::u64("MemoryMax", 1 << 30),
            UnitProperty::u64("CPUWeight", 39),
        ]
    );
}

#[test]
fn custom_root_and_versions() {
    let tmp = tempfile::tempdir().expect("tmp");
    let list = vec![("cpu".to_owned(), tmp.path().join("cpu"))];
    let units = Arc::new(FakeUnits {
        root: tmp.path().into(),
        calls: Mutex::default(),
        version: None,
    });
    let cg = Systemd::new(Layout::V1(list), "/node", units);
    assert_eq!(
        cg.pod_cgroup_parent(&pod("x")),
        "/node.slice/node-kubepods.slice/node-kubepods-besteffort.slice/node-kubepods-besteffort-poduid_x.slice"
    );
    assert_eq!(parse_systemd_version("252.38-1~deb12u1"), Some(252));
    assert_eq!(parse_systemd_version("\"v245.4-1.fc32\""), Some(245));
    assert_eq!(parse_systemd_version("245"), Some(245));
    assert_eq!(parse_systemd_version("x"), None);
}
