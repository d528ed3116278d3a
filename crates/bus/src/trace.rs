//! W3C trace context (`traceparent`, `tracestate`) carried in message
//! headers, so a report and the steering it caused share one trace.

use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::Headers;

struct HeaderInjector<'a>(&'a mut Headers);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value);
    }
}

struct HeaderExtractor<'a>(&'a Headers);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)
    }
    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k).collect()
    }
}

/// Writes the current span's context into `headers` (no-op without a
/// propagator or an OpenTelemetry layer).
pub fn inject(headers: &mut Headers) {
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut HeaderInjector(headers))
    });
}

/// Makes `span` a child of the context carried in `headers`, if any.
pub fn link(span: &tracing::Span, headers: &Headers) {
    if headers.get("traceparent").is_none() {
        return;
    }
    let cx =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)));
    let _ = span.set_parent(cx);
}
