//! The `key_value` layout (`weir.iceberg.mode=key_value`): every record as it is, whatever its
//! bytes mean: its partition, offset and timestamp, its key and value as binary, and its
//! headers. Partitioned by `hour(timestamp)` unless the topic says otherwise.

use std::sync::Arc;

use arrow_array::builder::{LargeBinaryBuilder, ListBuilder, StringBuilder, StructBuilder};
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow_schema::{DataType, Fields};
use bytes::Bytes;
use iceberg::spec::{
    ListType, NestedField, PrimitiveType, Schema, StructType, Transform, Type, UnboundPartitionSpec,
};
use iceberg::{Error, ErrorKind, Result};

/// Field ids of the layout (stable: a table keeps them across evolutions).
pub mod field {
    pub const PARTITION: i32 = 1;
    pub const OFFSET: i32 = 2;
    pub const TIMESTAMP: i32 = 3;
    pub const KEY: i32 = 4;
    pub const VALUE: i32 = 5;
    pub const HEADERS: i32 = 6;
    pub const HEADER: i32 = 7;
    pub const HEADER_KEY: i32 = 8;
    pub const HEADER_VALUE: i32 = 9;
    /// The dead-letter table's reason.
    pub const REASON: i32 = 10;
    /// The first id of a typed layout's `value` fields.
    pub const FIRST_VALUE_FIELD: i32 = 11;
}

/// One record, as the layout stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the epoch (the record's timestamp, as Kafka's).
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// The layout's table schema.
pub fn schema() -> Result<Schema> {
    schema_with(Type::Primitive(PrimitiveType::Binary), false)
}

/// A dead-letter table's schema: the layout's, and why each record is there.
pub fn dead_letter_schema() -> Result<Schema> {
    schema_with(Type::Primitive(PrimitiveType::Binary), true)
}

/// The layout's schema with `value` of type `value` (a typed layout's decoded value), and a
/// `reason` column for a dead-letter table.
pub fn schema_with(value: Type, reason: bool) -> Result<Schema> {
    let header = StructType::new(vec![
        NestedField::required(
            field::HEADER_KEY,
            "key",
            Type::Primitive(PrimitiveType::String),
        )
        .into(),
        NestedField::optional(
            field::HEADER_VALUE,
            "value",
            Type::Primitive(PrimitiveType::Binary),
        )
        .into(),
    ]);
    Schema::builder()
        .with_fields(vec![
            NestedField::required(
                field::PARTITION,
                "partition",
                Type::Primitive(PrimitiveType::Int),
            )
            .into(),
            NestedField::required(
                field::OFFSET,
                "offset",
                Type::Primitive(PrimitiveType::Long),
            )
            .into(),
            NestedField::required(
                field::TIMESTAMP,
                "timestamp",
                Type::Primitive(PrimitiveType::Timestamptz),
            )
            .into(),
            NestedField::optional(field::KEY, "key", Type::Primitive(PrimitiveType::Binary)).into(),
            NestedField::optional(field::VALUE, "value", value).into(),
            NestedField::optional(
                field::HEADERS,
                "headers",
                Type::List(ListType::new(
                    NestedField::list_element(field::HEADER, Type::Struct(header), true).into(),
                )),
            )
            .into(),
        ])
        .with_fields(reason.then(|| {
            NestedField::required(
                field::REASON,
                "reason",
                Type::Primitive(PrimitiveType::String),
            )
            .into()
        }))
        .build()
}

/// The default partition spec: by the hour of the record's timestamp.
pub fn hourly() -> Result<UnboundPartitionSpec> {
    Ok(UnboundPartitionSpec::builder()
        .add_partition_field(field::TIMESTAMP, "timestamp_hour", Transform::Hour)?
        .build())
}

/// `rows` cut into consecutive ranges of about `max_bytes` of keys and values each (at least
/// one row each).
pub fn chunks(rows: &[Row], max_bytes: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, r) in rows.iter().enumerate() {
        if i > start && bytes >= max_bytes {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len());
    }
    if start < rows.len() {
        out.push(start..rows.len());
    }
    out
}

/// Rows as an Arrow batch of `arrow_schema` (the table schema's Arrow form, whose fields carry
/// the Iceberg field ids the Parquet writer needs).
pub fn batch(arrow_schema: &arrow_schema::SchemaRef, rows: &[Row]) -> Result<RecordBatch> {
    batch_with(arrow_schema, rows, None, None)
}

/// [`batch`], with the `value` column given (a typed layout's) and a dead-letter table's
/// `reason` column.
pub fn batch_with(
    arrow_schema: &arrow_schema::SchemaRef,
    rows: &[Row],
    value: Option<ArrayRef>,
    reasons: Option<&[String]>,
) -> Result<RecordBatch> {
    let headers_field = arrow_schema
        .field_with_name("headers")
        .map_err(|e| Error::new(ErrorKind::DataInvalid, format!("the layout's schema: {e}")))?;
    let DataType::List(element) = headers_field.data_type() else {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            "the layout's headers are not a list",
        ));
    };
    let DataType::Struct(header_fields) = element.data_type() else {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            "the layout's header is not a struct",
        ));
    };
    let value = value.unwrap_or_else(|| Arc::new(binary(rows.iter().map(|r| r.value.as_deref()))));
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter_values(
            rows.iter().map(|r| r.partition),
        )),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.offset))),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                rows.iter().map(|r| r.timestamp_ms.saturating_mul(1000)),
            )
            .with_timezone("+00:00"),
        ),
        Arc::new(binary(rows.iter().map(|r| r.key.as_deref()))),
        value,
        Arc::new(headers(rows, Arc::clone(element), header_fields)),
    ];
    if let Some(reasons) = reasons {
        columns.push(Arc::new(arrow_array::StringArray::from_iter_values(
            reasons,
        )));
    }
    RecordBatch::try_new(Arc::clone(arrow_schema), columns).map_err(|e| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("records as an Arrow batch: {e}"),
        )
    })
}

/// Iceberg's `binary` is Arrow's `LargeBinary`.
fn binary<'a>(
    values: impl Iterator<Item = Option<&'a [u8]>> + Clone,
) -> arrow_array::LargeBinaryArray {
    // Sized first: growing by doubling copies the column over and over.
    let (n, bytes) = values
        .clone()
        .fold((0, 0), |(n, b), v| (n + 1, b + v.map_or(0, <[u8]>::len)));
    let mut b = LargeBinaryBuilder::with_capacity(n, bytes);
    b.extend(values);
    b.finish()
}

fn headers(
    rows: &[Row],
    element: arrow_schema::FieldRef,
    header_fields: &Fields,
) -> arrow_array::ListArray {
    let entry = StructBuilder::new(
        header_fields.clone(),
        vec![
            Box::new(StringBuilder::new()),
            Box::new(LargeBinaryBuilder::new()),
        ],
    );
    let mut list = ListBuilder::new(entry).with_field(element);
    for r in rows {
        for (k, v) in &r.headers {
            let s = list.values();
            s.field_builder::<StringBuilder>(0)
                .expect("the header key's builder")
                .append_value(k);
            let values = s
                .field_builder::<LargeBinaryBuilder>(1)
                .expect("the header value's builder");
            match v {
                Some(v) => values.append_value(v),
                None => values.append_null(),
            }
            s.append(true);
        }
        // A record without headers has an empty list, not a null one.
        list.append(true);
    }
    list.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::Array;

    #[test]
    fn chunks_cover_every_row_once_in_order() {
        let row = |len: usize| Row {
            partition: 0,
            offset: 0,
            timestamp_ms: 0,
            key: Some(Bytes::from(vec![0; 2])),
            value: (len > 0).then(|| Bytes::from(vec![0; len])),
            headers: vec![],
        };
        let rows: Vec<Row> = [10, 0, 30, 5, 100, 1, 1].into_iter().map(row).collect();
        let ranges = chunks(&rows, 20);
        // Cut once a chunk has 20 bytes or more: 12+2+32, 7+102, 3+3.
        assert_eq!(ranges, vec![0..3, 3..5, 5..7]);
        assert_eq!(chunks(&rows, usize::MAX), vec![0..7]);
        assert_eq!(chunks(&rows, 0).len(), rows.len(), "one row each at least");
        assert!(chunks(&[], 20).is_empty());
    }

    #[test]
    fn rows_become_a_batch_of_the_layouts_schema() {
        let schema = schema().expect("schema");
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).expect("arrow"));
        let rows = vec![
            Row {
                partition: 3,
                offset: 41,
                timestamp_ms: 1_700_000_000_123,
                key: Some(Bytes::from_static(b"k")),
                value: None,
                headers: vec![
                    ("trace".into(), Some(Bytes::from_static(b"t1"))),
                    ("empty".into(), None),
                ],
            },
            Row {
                partition: 3,
                offset: 42,
                timestamp_ms: 1_700_000_000_124,
                key: None,
                value: Some(Bytes::from_static(b"v")),
                headers: vec![],
            },
        ];
        let b = batch(&arrow, &rows).expect("batch");
        assert_eq!(b.num_rows(), 2);
        let ts = b
            .column(2)
            .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 1_700_000_000_123_000);
        assert!(b.column(3).is_null(1) && b.column(4).is_null(0));
        let headers = b.column(5).as_list::<i32>();
        assert_eq!(headers.value(0).len(), 2);
        assert_eq!(headers.value(1).len(), 0);
        assert!(!headers.is_null(1));
        let first = headers.value(0);
        let first = first.as_struct();
        assert_eq!(first.column(0).as_string::<i32>().value(1), "empty");
        assert!(first.column(1).is_null(1));
    }
}
