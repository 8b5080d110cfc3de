//! Every endpoint of the test registry, over real HTTP on 127.0.0.1.

use std::net::SocketAddr;

use reqwest::StatusCode;
use serde_json::{json, Value};
use sluice_test_registry::{Registry, Server, CONTENT_TYPE_V1};

const V1: &str = CONTENT_TYPE_V1;

/// A reqwest client. reqwest is built without a built-in crypto provider (as in the publisher,
/// which uses ring everywhere), so ring is installed as the process default before the first one.
fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(server: &Server) -> Client {
        Client { http: http(), base: server.url() }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).header("Accept", V1);
        if let Some(body) = body {
            req = req.header("Content-Type", V1).body(body.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
        let text = resp.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}"));
        assert_eq!(ct.as_deref(), Some(V1), "{path}: content type");
        (status, value)
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(reqwest::Method::PUT, path, Some(body)).await
    }

    async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.send(reqwest::Method::DELETE, path, None).await
    }

    async fn register(&self, subject: &str, schema: &str) -> (StatusCode, Value) {
        self.post(&format!("/subjects/{subject}/versions"), json!({ "schema": schema })).await
    }
}

const ORDER_V1: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"id","type":"long"},{"name":"item","type":"string"}]}"#;
/// v1 plus a field with a default: BACKWARD compatible.
const ORDER_V2: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"id","type":"long"},{"name":"item","type":"string"},
    {"name":"qty","type":"int","default":1}]}"#;
/// v2 plus a field without a default: not BACKWARD compatible.
const ORDER_BAD: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"id","type":"long"},{"name":"item","type":"string"},
    {"name":"qty","type":"int","default":1},{"name":"price","type":"double"}]}"#;

fn error_code(v: &Value) -> u64 {
    v["error_code"].as_u64().unwrap_or_else(|| panic!("no error_code in {v}"))
}

#[tokio::test]
async fn register_evolve_and_read_back() {
    let server = Server::spawn(local(), Registry::in_memory()).await.unwrap();
    let c = Client::new(&server);

    assert_eq!(c.get("/subjects").await, (StatusCode::OK, json!([])));
    let (st, body) = c.register("orders-value", ORDER_V1).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let id1 = body["id"].as_u64().unwrap();

    // Same schema again, with other whitespace and key order: same id, no new version.
    let reordered = r#"{ "namespace": "shop", "name": "Order", "type": "record",
        "fields": [ {"type": "long", "name": "id"}, {"type": "string", "name": "item"} ] }"#;
    assert_eq!(c.register("orders-value", reordered).await, (StatusCode::OK, json!({"id": id1})));
    assert_eq!(c.get("/subjects/orders-value/versions").await, (StatusCode::OK, json!([1])));

    // BACKWARD-compatible evolution: new version, new id.
    let (st, body) = c.register("orders-value", ORDER_V2).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let id2 = body["id"].as_u64().unwrap();
    assert_ne!(id1, id2);
    assert_eq!(c.get("/subjects/orders-value/versions").await, (StatusCode::OK, json!([1, 2])));

    // Incompatible: a new field without a default.
    let (st, body) = c.register("orders-value", ORDER_BAD).await;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_code(&body), 409);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Schema being registered is incompatible with an earlier schema for subject \"orders-value\", details: ["
        ),
        "{message}"
    );
    assert!(message.contains("READER_FIELD_MISSING_DEFAULT_VALUE"), "{message}");
    assert!(message.contains("price"), "{message}");
    assert!(message.contains("{oldSchemaVersion: 2}"), "{message}");
    assert!(message.contains("{compatibility: 'BACKWARD'}"), "{message}");
    assert_eq!(c.get("/subjects/orders-value/versions").await.1, json!([1, 2]));

    // The same schema under another subject reuses the global id.
    assert_eq!(c.register("other-value", ORDER_V1).await, (StatusCode::OK, json!({"id": id1})));
    assert_eq!(c.get("/subjects").await, (StatusCode::OK, json!(["orders-value", "other-value"])));

    // Reads.
    let (st, body) = c.get(&format!("/schemas/ids/{id2}")).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(body["schema"].as_str(), Some(ORDER_V2));
    let (st, body) = c.get("/schemas/ids/999").await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40403));
    assert_eq!(c.get("/schemas/ids/nonsense").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        c.get(&format!("/schemas/ids/{id1}/versions")).await.1,
        json!([{"subject": "orders-value", "version": 1}, {"subject": "other-value", "version": 1}])
    );

    let expect_v2 = json!({"subject": "orders-value", "version": 2, "id": id2, "schema": ORDER_V2});
    assert_eq!(c.get("/subjects/orders-value/versions/latest").await, (StatusCode::OK, expect_v2.clone()));
    assert_eq!(c.get("/subjects/orders-value/versions/2").await, (StatusCode::OK, expect_v2.clone()));
    assert_eq!(c.get("/subjects/orders-value/versions/-1").await, (StatusCode::OK, expect_v2));
    let (st, body) = c.get("/subjects/orders-value/versions/1").await;
    assert_eq!((st, body["id"].as_u64(), body["version"].as_u64()), (StatusCode::OK, Some(id1), Some(1)));
    let (st, body) = c.get("/subjects/orders-value/versions/7").await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40402));
    let (st, body) = c.get("/subjects/orders-value/versions/zero").await;
    assert_eq!((st, error_code(&body)), (StatusCode::UNPROCESSABLE_ENTITY, 42202));
    let (st, body) = c.get("/subjects/nobody/versions/latest").await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40401));
    let (st, body) = c.get("/subjects/nobody/versions").await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40401));

    // Lookup: POST /subjects/{s}.
    let (st, body) = c.post("/subjects/orders-value", json!({"schema": ORDER_V1})).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"subject": "orders-value", "version": 1, "id": id1, "schema": ORDER_V1}));
    let (st, body) = c.post("/subjects/orders-value", json!({"schema": ORDER_BAD})).await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40403));
    assert_eq!(body["message"], "Schema not found");
    let (st, body) = c.post("/subjects/nobody", json!({"schema": ORDER_V1})).await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40401));

    // Delete (soft), then the subject is gone but its ids still resolve.
    assert_eq!(c.delete("/subjects/other-value").await, (StatusCode::OK, json!([1])));
    assert_eq!(c.get("/subjects").await.1, json!(["orders-value"]));
    assert_eq!(c.get(&format!("/schemas/ids/{id1}")).await.0, StatusCode::OK);
    let (st, body) = c.delete("/subjects/other-value").await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40404));
    assert_eq!(c.delete("/subjects/other-value?permanent=true").await, (StatusCode::OK, json!([1])));
    let (st, body) = c.delete("/subjects/other-value").await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40401));
    // Registered again after deletion: same global id, versions start afresh after a hard delete.
    assert_eq!(c.register("other-value", ORDER_V1).await, (StatusCode::OK, json!({"id": id1})));
    assert_eq!(c.get("/subjects/other-value/versions").await.1, json!([1]));

    server.stop().await;
}

#[tokio::test]
async fn invalid_schemas_are_422() {
    let server = Server::spawn(local(), Registry::in_memory()).await.unwrap();
    let c = Client::new(&server);
    for bad in [
        "not json at all",
        r#"{"type":"record","name":"R"}"#,
        r#"{"type":"nosuchtype"}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"text"}]}"#,
    ] {
        let (st, body) = c.register("bad-value", bad).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
        assert_eq!(error_code(&body), 42201, "{bad}: {body}");
        assert!(body["message"].as_str().unwrap().starts_with("Invalid schema"), "{body}");
    }
    let (st, body) =
        c.post("/subjects/bad-value/versions", json!({"schema": r#""string""#, "schemaType": "PROTOBUF"})).await;
    assert_eq!((st, error_code(&body)), (StatusCode::UNPROCESSABLE_ENTITY, 42201));
    let (st, body) = c
        .post(
            "/subjects/bad-value/versions",
            json!({"schema": r#""string""#, "references": [{"name": "x", "subject": "y", "version": 1}]}),
        )
        .await;
    assert_eq!((st, error_code(&body)), (StatusCode::UNPROCESSABLE_ENTITY, 42201));
    // Explicit AVRO and empty references are fine.
    let (st, body) = c
        .post("/subjects/ok-value/versions", json!({"schema": r#""string""#, "schemaType": "AVRO", "references": []}))
        .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert_eq!(c.get("/subjects").await.1, json!(["ok-value"]));
    server.stop().await;
}

#[tokio::test]
async fn config_levels_and_compatibility_checks() {
    let server = Server::spawn(local(), Registry::in_memory()).await.unwrap();
    let c = Client::new(&server);

    assert_eq!(c.get("/config").await, (StatusCode::OK, json!({"compatibilityLevel": "BACKWARD"})));
    let (st, body) = c.put("/config", json!({"compatibility": "SIDEWAYS"})).await;
    assert_eq!((st, error_code(&body)), (StatusCode::UNPROCESSABLE_ENTITY, 42203));
    for level in ["NONE", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "BACKWARD"]
    {
        assert_eq!(
            c.put("/config", json!({"compatibility": level})).await,
            (StatusCode::OK, json!({"compatibility": level}))
        );
        assert_eq!(c.get("/config").await.1, json!({"compatibilityLevel": level}));
    }

    // Subject level: unset → 40408 unless defaultToGlobal.
    let (st, body) = c.get("/config/orders-value").await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40408));
    assert_eq!(c.get("/config/orders-value?defaultToGlobal=true").await.1, json!({"compatibilityLevel": "BACKWARD"}));

    assert_eq!(c.register("orders-value", ORDER_V1).await.0, StatusCode::OK);
    assert_eq!(c.register("orders-value", ORDER_V2).await.0, StatusCode::OK);

    // With a version, and with latest.
    let check = |v: &'static str, schema: &'static str| {
        let c = &c;
        async move { c.post(&format!("/compatibility/subjects/orders-value/versions/{v}"), json!({"schema": schema})).await }
    };
    assert_eq!(check("latest", ORDER_BAD).await, (StatusCode::OK, json!({"is_compatible": false})));
    assert_eq!(check("2", ORDER_V2).await, (StatusCode::OK, json!({"is_compatible": true})));
    assert_eq!(check("1", ORDER_V2).await, (StatusCode::OK, json!({"is_compatible": true})));
    let (st, body) = check("9", ORDER_V2).await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40402));
    let (st, body) =
        c.post("/compatibility/subjects/orders-value/versions/latest?verbose=true", json!({"schema": ORDER_BAD})).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(body["is_compatible"], false);
    assert!(body["messages"][0].as_str().unwrap().contains("READER_FIELD_MISSING_DEFAULT_VALUE"), "{body}");
    // Without a version: the check registration would make.
    let (st, body) = c.post("/compatibility/subjects/orders-value/versions", json!({"schema": ORDER_BAD})).await;
    assert_eq!((st, body), (StatusCode::OK, json!({"is_compatible": false})));

    // FORWARD: the old schema must read the new one's data. Dropping a field that has no default
    // in the old schema breaks that; adding a field (without default) does not.
    assert_eq!(c.put("/config/orders-value", json!({"compatibility": "FORWARD"})).await.0, StatusCode::OK);
    assert_eq!(c.get("/config/orders-value").await.1, json!({"compatibilityLevel": "FORWARD"}));
    let dropped_item = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
        {"name":"id","type":"long"},{"name":"qty","type":"int","default":1}]}"#;
    let (st, body) = c.register("orders-value", dropped_item).await;
    assert_eq!((st, error_code(&body)), (StatusCode::CONFLICT, 409), "{body}");
    assert!(body["message"].as_str().unwrap().contains("{compatibility: 'FORWARD'}"));
    let (st, body) = c.register("orders-value", ORDER_BAD).await;
    assert_eq!(st, StatusCode::OK, "FORWARD allows a new field without default: {body}");

    // Removing the subject-level config returns it and falls back to the global level.
    assert_eq!(c.delete("/config/orders-value").await.1, json!({"compatibilityLevel": "FORWARD"}));
    let (st, body) = c.get("/config/orders-value").await;
    assert_eq!((st, error_code(&body)), (StatusCode::NOT_FOUND, 40408));

    // Transitive levels look at every version, not just the latest.
    // v1 {a}, v2 {a, b with default}, then {b without default}:
    // Against the latest (v2) that is BACKWARD compatible (v2 wrote b); against v1 it is not.
    let t1 = r#"{"type":"record","name":"T","fields":[{"name":"a","type":"int"}]}"#;
    let t2 =
        r#"{"type":"record","name":"T","fields":[{"name":"a","type":"int"},{"name":"b","type":"int","default":0}]}"#;
    let t3 = r#"{"type":"record","name":"T","fields":[{"name":"b","type":"int"}]}"#;
    assert_eq!(c.register("t-value", t1).await.0, StatusCode::OK);
    assert_eq!(c.register("t-value", t2).await.0, StatusCode::OK);
    let all = |schema: &'static str| {
        let c = &c;
        async move { c.post("/compatibility/subjects/t-value/versions", json!({"schema": schema})).await.1 }
    };
    assert_eq!(all(t3).await, json!({"is_compatible": true}), "BACKWARD checks the latest only");
    assert_eq!(c.put("/config/t-value", json!({"compatibility": "BACKWARD_TRANSITIVE"})).await.0, StatusCode::OK);
    assert_eq!(all(t3).await, json!({"is_compatible": false}), "BACKWARD_TRANSITIVE checks v1 too");
    let (st, body) = c.register("t-value", t3).await;
    assert_eq!((st, error_code(&body)), (StatusCode::CONFLICT, 409));
    assert!(body["message"].as_str().unwrap().contains("{oldSchemaVersion: 1}"), "{body}");
    assert_eq!(c.put("/config/t-value", json!({"compatibility": "NONE"})).await.0, StatusCode::OK);
    assert_eq!(c.register("t-value", t3).await.0, StatusCode::OK);
    assert_eq!(c.get("/subjects/t-value/versions").await.1, json!([1, 2, 3]));

    // FULL: both ways. Type promotion int → long is backward only.
    let p1 = r#"{"type":"record","name":"P","fields":[{"name":"n","type":"int"}]}"#;
    let p2 = r#"{"type":"record","name":"P","fields":[{"name":"n","type":"long"}]}"#;
    assert_eq!(c.register("p-value", p1).await.0, StatusCode::OK);
    assert_eq!(c.put("/config/p-value", json!({"compatibility": "FULL"})).await.0, StatusCode::OK);
    let (st, body) = c.register("p-value", p2).await;
    assert_eq!((st, error_code(&body)), (StatusCode::CONFLICT, 409), "{body}");
    assert_eq!(c.put("/config/p-value", json!({"compatibility": "BACKWARD"})).await.0, StatusCode::OK);
    assert_eq!(c.register("p-value", p2).await.0, StatusCode::OK);

    // Enums: dropping a symbol the old writer used is refused (partial compatibility is not enough).
    let e1 = r#"{"type":"enum","name":"E","symbols":["A","B"]}"#;
    let e2 = r#"{"type":"enum","name":"E","symbols":["A"]}"#;
    assert_eq!(c.register("e-value", e1).await.0, StatusCode::OK);
    assert_eq!(c.register("e-value", e2).await.0, StatusCode::CONFLICT);

    server.stop().await;
}

#[tokio::test]
async fn accept_and_content_type_headers() {
    let server = Server::spawn(local(), Registry::in_memory()).await.unwrap();
    let http = http();
    let url = server.url();
    // The multi-value Accept header Confluent's Java client sends.
    let multi = "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json";
    let resp = http
        .post(format!("{url}/subjects/h-value/versions"))
        .header("Accept", multi)
        .header("Content-Type", "application/vnd.schemaregistry.v1+json")
        .body(json!({"schema": ORDER_V1}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], V1);
    assert_eq!(resp.json::<Value>().await.unwrap(), json!({"id": 1}));

    for (accept, expect) in [
        (Some("application/json"), StatusCode::OK),
        (Some("application/json; q=0.5, */*; q=0.1"), StatusCode::OK),
        (Some("*/*"), StatusCode::OK),
        (None, StatusCode::OK),
        (Some("text/html"), StatusCode::NOT_ACCEPTABLE),
    ] {
        let mut req = http.get(format!("{url}/subjects/h-value/versions/latest"));
        if let Some(a) = accept {
            req = req.header("Accept", a);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), expect, "Accept: {accept:?}");
        let body: Value = resp.json().await.unwrap();
        if expect == StatusCode::OK {
            assert_eq!(body["id"], 1);
        } else {
            assert_eq!(body["error_code"], 406);
        }
    }

    // Plain application/json bodies are fine too; text/plain is not.
    for (ct, expect) in [("application/json", StatusCode::OK), ("text/plain", StatusCode::UNSUPPORTED_MEDIA_TYPE)] {
        let resp = http
            .post(format!("{url}/subjects/h-value"))
            .header("Content-Type", ct)
            .body(json!({"schema": ORDER_V1}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), expect, "{ct}");
    }

    // Subjects with a slash arrive percent-encoded.
    let resp = http
        .post(format!("{url}/subjects/a%2Fb-value/versions"))
        .header("Content-Type", V1)
        .body(json!({"schema": ORDER_V1}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let subjects: Value = http.get(format!("{url}/subjects")).send().await.unwrap().json().await.unwrap();
    assert_eq!(subjects, json!(["a/b-value", "h-value"]));

    // Unknown routes answer in the Confluent error shape.
    let resp = http.get(format!("{url}/no/such/route")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(resp.json::<Value>().await.unwrap()["error_code"], 404);
    server.stop().await;
}

#[tokio::test]
async fn data_file_keeps_ids_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("registry.json");

    let server = Server::spawn(local(), Registry::with_data_file(&data).unwrap()).await.unwrap();
    let c = Client::new(&server);
    assert_eq!(c.register("a-value", ORDER_V1).await.1, json!({"id": 1}));
    assert_eq!(c.register("a-value", ORDER_V2).await.1, json!({"id": 2}));
    assert_eq!(c.put("/config/a-value", json!({"compatibility": "FULL"})).await.0, StatusCode::OK);
    assert_eq!(c.put("/config", json!({"compatibility": "NONE"})).await.0, StatusCode::OK);
    server.stop().await;

    let server = Server::spawn(local(), Registry::with_data_file(&data).unwrap()).await.unwrap();
    let c = Client::new(&server);
    assert_eq!(c.get("/subjects/a-value/versions").await.1, json!([1, 2]));
    assert_eq!(c.get("/schemas/ids/2").await.1, json!({"schema": ORDER_V2}));
    assert_eq!(c.get("/config").await.1, json!({"compatibilityLevel": "NONE"}));
    assert_eq!(c.get("/config/a-value").await.1, json!({"compatibilityLevel": "FULL"}));
    // The canonical index was rebuilt: same schema, same id, under a new subject too.
    assert_eq!(c.register("a-value", ORDER_V1).await.1, json!({"id": 1}));
    assert_eq!(c.register("b-value", ORDER_V2).await.1, json!({"id": 2}));
    // Ids keep counting from where they were.
    let fresh = r#"{"type":"record","name":"Fresh","fields":[{"name":"x","type":"int"}]}"#;
    assert_eq!(c.register("c-value", fresh).await.1, json!({"id": 3}));
    server.stop().await;
}
