//! The real client crate the publisher uses (`schema_registry_converter`) against the test
//! registry: registration through TopicNameStrategy, Confluent wire format encoding and decoding,
//! evolution, and the registry's refusal surfacing as a client error.

use apache_avro::types::Value;
use schema_registry_converter::async_impl::avro::{AvroDecoder, AvroEncoder};
use schema_registry_converter::async_impl::schema_registry::{
    get_all_subjects, get_all_versions, get_schema_by_id, get_schema_by_subject, is_compatible_schema, post_schema,
    SrSettings,
};
use schema_registry_converter::schema_registry_common::{SchemaType, SubjectNameStrategy, SuppliedSchema};
use sluice_test_registry::{Registry, Server};

const KEY: &str = r#"{"type":"record","name":"OrderKey","namespace":"shop","fields":[{"name":"id","type":"long"}]}"#;
const VALUE_V1: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"id","type":"long"},{"name":"item","type":"string"}]}"#;
const VALUE_V2: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"id","type":"long"},{"name":"item","type":"string"},
    {"name":"note","type":["null","string"],"default":null}]}"#;
const VALUE_BAD: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"price","type":"double"}]}"#;

fn supplied(schema: &str) -> SuppliedSchema {
    SuppliedSchema::new(None, SchemaType::Avro, schema.to_owned())
}

#[tokio::test]
async fn schema_registry_converter_round_trip() {
    let server = Server::spawn("127.0.0.1:0".parse().unwrap(), Registry::in_memory()).await.unwrap();
    // The converter builds a reqwest client, which in a workspace build has no built-in crypto
    // provider (the publisher's `rustls-no-provider`): ring, as everywhere in Sluice.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = SrSettings::new_builder(server.url()).no_proxy().build().unwrap();

    // Key and value registered by the encoder itself (TopicNameStrategy with a supplied schema).
    let encoder = AvroEncoder::new(settings.clone());
    let key_strategy = SubjectNameStrategy::TopicNameStrategyWithSchema("orders".into(), true, supplied(KEY));
    let value_strategy = SubjectNameStrategy::TopicNameStrategyWithSchema("orders".into(), false, supplied(VALUE_V1));
    let key_bytes =
        encoder.encode_value(Value::Record(vec![("id".into(), Value::Long(7))]), &key_strategy).await.unwrap();
    let value = Value::Record(vec![("id".into(), Value::Long(7)), ("item".into(), Value::String("apple".into()))]);
    let value_bytes = encoder.encode_value(value.clone(), &value_strategy).await.unwrap();

    // Confluent wire format: magic byte 0, big-endian schema id, then the Avro body.
    assert_eq!(key_bytes[0], 0);
    assert_eq!(value_bytes[0], 0);
    let key_id = u32::from_be_bytes(key_bytes[1..5].try_into().unwrap());
    let value_id = u32::from_be_bytes(value_bytes[1..5].try_into().unwrap());
    assert_ne!(key_id, value_id);
    assert_eq!(&key_bytes[5..], &[14], "long 7 zig-zag encoded");

    let mut subjects = get_all_subjects(&settings).await.unwrap();
    subjects.sort();
    assert_eq!(subjects, ["orders-key", "orders-value"]);
    assert_eq!(get_all_versions(&settings, "orders-value".into()).await.unwrap(), [1]);

    // A separate decoder resolves the ids through GET /schemas/ids/{id}?deleted=true.
    let decoder = AvroDecoder::new(settings.clone());
    let decoded = decoder.decode(Some(&value_bytes)).await.unwrap();
    assert_eq!(decoded.value, value);
    assert_eq!(decoded.name.map(|n| n.fullname(None)), Some("shop.Order".to_owned()));
    let decoded_key = decoder.decode(Some(&key_bytes)).await.unwrap();
    assert_eq!(decoded_key.value, Value::Record(vec![("id".into(), Value::Long(7))]));

    // Latest by subject (the strategy without a schema).
    let latest = get_schema_by_subject(&settings, &SubjectNameStrategy::TopicNameStrategy("orders".into(), false))
        .await
        .unwrap();
    assert_eq!((latest.id, latest.version), (value_id, Some(1)));
    let by_id = get_schema_by_id(value_id, &settings).await.unwrap();
    assert_eq!(by_id.schema, VALUE_V1);

    // Registering the same schema again returns the same id.
    let again = post_schema(&settings, "orders-value".into(), supplied(VALUE_V1)).await.unwrap();
    assert_eq!(again.id, value_id);

    // Evolution: compatible (new nullable field with default) → new id and version 2.
    assert!(is_compatible_schema(&settings, "orders-value".into(), supplied(VALUE_V2)).await.unwrap());
    let v2 = post_schema(&settings, "orders-value".into(), supplied(VALUE_V2)).await.unwrap();
    assert_ne!(v2.id, value_id);
    assert_eq!(get_all_versions(&settings, "orders-value".into()).await.unwrap(), [1, 2]);
    let encoder2 = AvroEncoder::new(settings.clone());
    let strategy2 = SubjectNameStrategy::TopicNameStrategyWithSchema("orders".into(), false, supplied(VALUE_V2));
    let value2 = Value::Record(vec![
        ("id".into(), Value::Long(8)),
        ("item".into(), Value::String("pear".into())),
        ("note".into(), Value::Union(1, Box::new(Value::String("ripe".into())))),
    ]);
    let bytes2 = encoder2.encode_value(value2.clone(), &strategy2).await.unwrap();
    assert_eq!(u32::from_be_bytes(bytes2[1..5].try_into().unwrap()), v2.id);
    assert_eq!(decoder.decode(Some(&bytes2)).await.unwrap().value, value2);
    // Old records still decode with their own (old) writer schema.
    assert_eq!(decoder.decode(Some(&value_bytes)).await.unwrap().value, value);

    // Incompatible: the client reports the registry's 409 message.
    assert!(!is_compatible_schema(&settings, "orders-value".into(), supplied(VALUE_BAD)).await.unwrap());
    let err = post_schema(&settings, "orders-value".into(), supplied(VALUE_BAD)).await.unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(text.contains("409"), "{text}");
    assert!(text.contains("incompatible with an earlier schema"), "{text}");
    assert!(!err.retriable);
    assert_eq!(get_all_versions(&settings, "orders-value".into()).await.unwrap(), [1, 2]);

    server.stop().await;
}
