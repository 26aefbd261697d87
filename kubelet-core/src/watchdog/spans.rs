//! The tracing spans each thread is in, for the stall dump: a stuck worker's spans name the
//! task it is polling (`sync_pod{pod=…}`, …).
//!
//! Each thread keeps its own stack of span names behind an uncontended mutex; a global table
//! maps thread IDs to those stacks so the watchdog thread can read them. The subscriber
//! reports entries and exits through [`entered`] and [`exited`] (the `kubelet` binary does it
//! from a `tracing_subscriber` layer); without that, dumps have no spans.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

type Stack = Arc<Mutex<Vec<&'static str>>>;

/// Every thread's stack that has ever entered a span, by kernel thread ID.
fn table() -> &'static Mutex<HashMap<u32, Stack>> {
    static TABLE: OnceLock<Mutex<HashMap<u32, Stack>>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default)
}

/// This thread's stack, registered in the table at its first span; removed from the table
/// when the thread exits.
struct Registered {
    tid: u32,
    stack: Stack,
}

impl Drop for Registered {
    fn drop(&mut self) {
        table()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.tid);
    }
}

thread_local! {
    static MINE: RefCell<Option<Registered>> = const { RefCell::new(None) };
}

/// The kernel's ID of the calling thread (`gettid(2)`: no file system call on the worker
/// that enters a span).
fn own_tid() -> Option<u32> {
    u32::try_from(nix::unistd::gettid().as_raw()).ok()
}

fn with_stack(f: impl FnOnce(&mut Vec<&'static str>)) {
    let _ = MINE.try_with(|mine| {
        let mut mine = mine.borrow_mut();
        if mine.is_none() {
            let Some(tid) = own_tid() else { return };
            let stack = Stack::default();
            table()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(tid, stack.clone());
            *mine = Some(Registered { tid, stack });
        }
        if let Some(registered) = mine.as_ref() {
            f(&mut registered.stack.lock().unwrap_or_else(|e| e.into_inner()));
        }
    });
}

/// The calling thread entered span `name`.
pub fn entered(name: &'static str) {
    with_stack(|stack| stack.push(name));
}

/// The calling thread left span `name` (the innermost one of that name).
pub fn exited(name: &'static str) {
    with_stack(|stack| {
        if let Some(at) = stack.iter().rposition(|n| *n == name) {
            stack.remove(at);
        }
    });
}

/// The spans thread `tid` of this process is in, outermost first, joined by `>`; empty when
/// none (or when no subscriber reports them).
pub(crate) fn of_thread(tid: u32) -> String {
    let stack = table()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&tid)
        .cloned();
    stack
        .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).join(">"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_s_spans_are_seen_from_another_thread() {
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            entered("outer");
            entered("inner");
            entered("leaf");
            exited("leaf");
            let _ = entered_tx.send(own_tid());
            let _ = done_rx.recv();
        });
        let tid = entered_rx.recv().expect("sent").expect("a tid");
        assert_eq!(of_thread(tid), "outer>inner");
        drop(done_tx);
        worker.join().expect("joined");
        assert_eq!(of_thread(tid), "", "an exited thread is forgotten");
    }
}
