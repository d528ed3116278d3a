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
    /// The endpoint names OTLP/gRPC's port (said once logging is up).
    grpc_port: bool,
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
        use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
        let url = traces_url(&cfg.otlp_endpoint)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Poster::new()?)
            .with_endpoint(url.as_str())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Otlp(e.to_string()))?;
        guard.grpc_port = url.port() == Some(GRPC_PORT);
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
    if guard.grpc_port {
        tracing::warn!(endpoint = %cfg.otlp_endpoint, "telemetry.otlp_endpoint names port {GRPC_PORT}, OTLP/gRPC's: XO exports OTLP over HTTP (a collector's port 4318), and a collector that speaks only gRPC there refuses the spans");
    }
    Ok(guard)
}

/// OTLP/gRPC's port: an endpoint on it is most likely not an HTTP one.
const GRPC_PORT: u16 = 4317;

/// The most of a collector's answer read (what OpenTelemetry's own
/// clients allow).
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// How long one export may take (OTLP's default).
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where spans are posted: `telemetry.otlp_endpoint` is the collector's
/// base URL, to which OTLP/HTTP's path `v1/traces` is added (as
/// OpenTelemetry does with `OTEL_EXPORTER_OTLP_ENDPOINT`); one that
/// already ends in it is used as it is.
fn traces_url(endpoint: &str) -> Result<url::Url, TelemetryError> {
    let bad = |why: &str| {
        TelemetryError::Otlp(format!(
            "{endpoint:?} {why}: give the collector's OTLP/HTTP base URL, e.g. http://localhost:4318"
        ))
    };
    let mut url = url::Url::parse(endpoint).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("is not an http:// or https:// URL with a host"));
    }
    if !url.path().trim_end_matches('/').ends_with("/v1/traces") {
        let path = format!("{}/v1/traces", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    Ok(url)
}

/// Posts the exporter's requests with the project's reqwest. The SDK's
/// batch processor exports on a thread of its own, outside any tokio
/// runtime, so the poster drives its requests on a runtime of its own.
#[derive(Debug)]
struct Poster {
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl Poster {
    fn new() -> Result<Self, TelemetryError> {
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Otlp(format!("the HTTP client: {e}")))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TelemetryError::Otlp(format!("the exporter's runtime: {e}")))?;
        Ok(Self { client, runtime })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Poster {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let (parts, body) = request.into_parts();
        let sent = self
            .client
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body);
        self.runtime.block_on(async move {
            let mut response = sent.send().await?;
            let mut answer = opentelemetry_http::Response::builder().status(response.status());
            if let Some(h) = answer.headers_mut() {
                *h = response.headers().clone();
            }
            // A collector's answer is a few bytes; one that goes on is cut
            // off, not read into memory.
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > MAX_ANSWER {
                    return Err(format!("the collector's answer exceeds {MAX_ANSWER} bytes").into());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(answer.body(body.into())?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_posted_to_the_collectors_v1_traces() {
        for (given, posted) in [
            ("http://localhost:4318", "http://localhost:4318/v1/traces"),
            ("http://localhost:4318/", "http://localhost:4318/v1/traces"),
            (
                "https://otel.example/otlp",
                "https://otel.example/otlp/v1/traces",
            ),
            ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
            ("http://c:4318/v1/traces/", "http://c:4318/v1/traces/"),
        ] {
            assert_eq!(traces_url(given).unwrap().as_str(), posted, "{given}");
        }
    }

    #[test]
    fn an_endpoint_that_is_no_http_url_is_refused_naming_the_key() {
        for bad in ["localhost:4318", "grpc://c:4317", "http://", "4318", ""] {
            let e = traces_url(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("config key telemetry.otlp_endpoint:"),
                "{bad}: {e}"
            );
            assert!(e.contains("http://localhost:4318"), "{bad}: {e}");
        }
    }
}
