//! Telemetry: `tracing` logs (pretty or JSON), optional OTLP trace export,
//! and the W3C propagator that carries trace context in message headers.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogFormat, TelemetryConfig};

/// Flushes and shuts down the exporter when dropped (last in shutdown order).
#[derive(Debug, Default)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    pub fn shutdown(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.force_flush();
            let _ = p.shutdown();
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Installs the W3C trace-context propagator globally.
pub fn install_propagator() {
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
}

/// Why telemetry could not be set up; the config key is named.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("config key telemetry.log_level: {0}")]
    LogLevel(String),
    #[error("config key telemetry.otlp_endpoint: {0}")]
    Otlp(String),
    /// Logging was set up already in this process.
    #[error("logging already set up in this process: {0}")]
    AlreadySet(String),
}

/// Sets up logging and, if `otlp_endpoint` is set, OTLP export.
pub fn init(
    cfg: &TelemetryConfig,
    service: &'static str,
) -> Result<TelemetryGuard, TelemetryError> {
    install_propagator();
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.log_level))
        .map_err(|e| TelemetryError::LogLevel(e.to_string()))?;
    let fmt = match cfg.log_format {
        // Colour only for a person at a terminal: a log file or a pipe gets
        // plain text.
        LogFormat::Pretty => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_target(false)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_current_span(true)
            .boxed(),
    };
    let mut guard = TelemetryGuard::default();
    let otel = if cfg.otlp_endpoint.is_empty() {
        None
    } else {
        use opentelemetry_otlp::WithExportConfig;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(&cfg.otlp_endpoint)
            .build()
            .map_err(|e| TelemetryError::Otlp(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(service)
                    .build(),
            )
            .build();
        let tracer = provider.tracer(service);
        guard.provider = Some(provider);
        Some(tracing_opentelemetry::layer().with_tracer(tracer))
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init()
        .map_err(|e| TelemetryError::AlreadySet(e.to_string()))?;
    Ok(guard)
}
