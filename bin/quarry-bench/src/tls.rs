//! The HTTPS clients of `--tls`: the SDK's own with the system's roots, or with the CA
//! certificates of `--cacert` (and nothing else); with `--insecure`, one that accepts any
//! certificate (quarry-tls's verifier for tools told so), for a trial server with a self-signed
//! certificate. Only `--insecure` picks the latter: without it every certificate is checked.

use std::path::Path;

use anyhow::Context;
use aws_smithy_runtime_api::client::http::{
    http_client_fn, HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::http::Response;
use aws_smithy_types::body::SdkBody;

/// The SDK's HTTPS client trusting the CA certificates in `cacert` (PEM) only.
pub fn trusting(cacert: &Path) -> anyhow::Result<SharedHttpClient> {
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
    let pem = std::fs::read(cacert)
        .with_context(|| format!("cannot read --cacert {}", cacert.display()))?;
    let context = TlsContext::builder()
        .with_trust_store(TrustStore::empty().with_pem_certificate(pem))
        .build()
        .with_context(|| format!("--cacert {}", cacert.display()))?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(context)
        .build_https())
}

type Hyper = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    SdkBody,
>;

/// An HTTPS client that accepts any server certificate (see the module doc).
pub fn insecure() -> anyhow::Result<SharedHttpClient> {
    let config =
        quarry_tls::insecure::insecure_client_config().context("cannot set up the TLS client")?;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    let client: Hyper =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    let connector = SharedHttpConnector::new(Insecure(client));
    Ok(http_client_fn(move |_, _| connector.clone()))
}

#[derive(Clone)]
struct Insecure(Hyper);

impl std::fmt::Debug for Insecure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InsecureHttpsClient")
    }
}

impl HttpConnector for Insecure {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = self.0.clone();
        HttpConnectorFuture::new(async move {
            let request = request
                .try_into_http1x()
                .map_err(|e| ConnectorError::other(e.into(), None))?;
            let response = client
                .request(request)
                .await
                .map_err(|e| ConnectorError::io(e.into()))?;
            Response::try_from(response.map(SdkBody::from_body_1_x))
                .map_err(|e| ConnectorError::other(e.into(), None))
        })
    }
}
