//! A `tracing_subscriber` layer that tells the stall watchdog which spans each thread is in
//! ([`kubelet_core::watchdog::spans`]), so a stall's thread dump names what a stuck worker
//! was polling. Add it to the subscriber next to the formatter:
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(kubelet::span_stacks::SpanStacks)
//!     .init();
//! ```

use tracing::Subscriber;
use tracing::span::Id;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use kubelet_core::watchdog::spans;

/// The layer (see the [module docs](self)); costs an uncontended lock per span entry and exit.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpanStacks;

impl<S> Layer<S> for SpanStacks
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            spans::entered(span.name());
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            spans::exited(span.name());
        }
    }
}
