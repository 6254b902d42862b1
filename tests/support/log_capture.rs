//! Capturing every `tracing` event of the test process, from every thread.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use tracing_subscriber::fmt::format::FmtSpan;

/// Install (once) a global TRACE-level subscriber for all crates and return its buffer.
pub fn captured() -> &'static Arc<Mutex<Vec<u8>>> {
    captured_with(FmtSpan::NONE)
}

/// As [`captured`], with these span events written too (e.g. `FmtSpan::CLOSE`: each span
/// once, with its fields, when it closes). The first call in a process chooses.
pub fn captured_with(span_events: FmtSpan) -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_span_events(span_events)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        log
    })
}

/// What was captured so far, as text.
pub fn text() -> String {
    String::from_utf8_lossy(&captured().lock().unwrap()).into_owned()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
