//! Resource quantity parsing (`resources::quantity_value`, `quantity_milli_value`,
//! `parse_quantity_nanos`, `qos::parse_quantity`; upstream `resource.ParseQuantity`) on any
//! string a pod spec can carry.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| {
    let _ = kubelet_core::resources::quantity_value(s);
    let _ = kubelet_core::resources::quantity_milli_value(s);
    let _ = kubelet_core::resources::parse_quantity_nanos(s);
    let _ = kubelet_core::qos::parse_quantity(s);
});
