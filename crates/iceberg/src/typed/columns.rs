//! Conformed values ([`super::conform`]) into an Arrow column of the table's type, as
//! `iceberg::arrow` gives it (Iceberg's binary is `LargeBinary`, its fixed and uuid
//! `FixedSizeBinary`, its timestamps microseconds).

use std::sync::Arc;

use arrow_array::builder::{LargeBinaryBuilder, LargeStringBuilder, StringBuilder};
use arrow_array::types::ArrowPrimitiveType;
use arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, Time64MicrosecondType,
    TimestampMicrosecondType,
};
use arrow_array::{
    ArrayRef, BooleanArray, Decimal128Array, FixedSizeBinaryArray, ListArray, MapArray,
    PrimitiveArray, StructArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, TimeUnit};

use super::Datum;

/// The column of `values` (each conformed to the type `ty` is the Arrow form of).
pub fn column(ty: &DataType, values: &[&Datum]) -> Result<ArrayRef, String> {
    let nulls = || NullBuffer::from_iter(values.iter().map(|d| **d != Datum::Null));
    Ok(match ty {
        DataType::Boolean => Arc::new(BooleanArray::from_iter(values.iter().map(|d| match d {
            Datum::Bool(b) => Some(*b),
            _ => None,
        }))),
        DataType::Int32 => primitive::<Int32Type>(values, |d| match d {
            Datum::Long(v) => i32::try_from(*v).ok(),
            _ => None,
        }),
        DataType::Int64 => primitive::<Int64Type>(values, |d| match d {
            Datum::Long(v) => Some(*v),
            _ => None,
        }),
        DataType::Float32 => primitive::<Float32Type>(values, |d| match d {
            Datum::Double(v) => Some(*v as f32),
            _ => None,
        }),
        DataType::Float64 => primitive::<Float64Type>(values, |d| match d {
            Datum::Double(v) => Some(*v),
            _ => None,
        }),
        DataType::Date32 => primitive::<Date32Type>(values, |d| match d {
            Datum::Date(v) => Some(*v),
            _ => None,
        }),
        DataType::Time64(TimeUnit::Microsecond) => {
            primitive::<Time64MicrosecondType>(values, |d| match d {
                Datum::Time(v) => Some(*v),
                _ => None,
            })
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => Arc::new(
            PrimitiveArray::<TimestampMicrosecondType>::from_iter(values.iter().map(|d| match d {
                Datum::Timestamp(v) => Some(*v),
                _ => None,
            }))
            .with_timezone_opt(tz.clone()),
        ),
        DataType::Decimal128(p, s) => Arc::new(
            Decimal128Array::from_iter(values.iter().map(|d| match d {
                Datum::Decimal(v) => Some(*v),
                _ => None,
            }))
            .with_precision_and_scale(*p, *s)
            .map_err(|e| e.to_string())?,
        ),
        DataType::Utf8 => {
            let mut b = StringBuilder::with_capacity(values.len(), total(values));
            b.extend(values.iter().map(|d| text(d)));
            Arc::new(b.finish())
        }
        DataType::LargeUtf8 => {
            let mut b = LargeStringBuilder::with_capacity(values.len(), total(values));
            b.extend(values.iter().map(|d| text(d)));
            Arc::new(b.finish())
        }
        DataType::LargeBinary => {
            let mut b = LargeBinaryBuilder::with_capacity(values.len(), total(values));
            b.extend(values.iter().map(|d| bytes(d)));
            Arc::new(b.finish())
        }
        DataType::FixedSizeBinary(n) => Arc::new(
            FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                values.iter().map(|d| bytes(d)),
                *n,
            )
            .map_err(|e| e.to_string())?,
        ),
        DataType::Struct(fields) => {
            let mut children = Vec::with_capacity(fields.len());
            for (i, f) in fields.iter().enumerate() {
                let child: Vec<&Datum> = values
                    .iter()
                    .map(|d| match d {
                        Datum::Fields(fs) => fs.get(i).unwrap_or(&Datum::Null),
                        _ => &Datum::Null,
                    })
                    .collect();
                children.push(column(f.data_type(), &child)?);
            }
            Arc::new(
                StructArray::try_new(fields.clone(), children, Some(nulls()))
                    .map_err(|e| e.to_string())?,
            )
        }
        DataType::List(element) => {
            let mut lengths = Vec::with_capacity(values.len());
            let mut items: Vec<&Datum> = Vec::new();
            for d in values {
                match d {
                    Datum::List(l) => {
                        lengths.push(l.len());
                        items.extend(l.iter());
                    }
                    _ => lengths.push(0),
                }
            }
            let child = column(element.data_type(), &items)?;
            Arc::new(
                ListArray::try_new(
                    Arc::clone(element),
                    OffsetBuffer::from_lengths(lengths),
                    child,
                    Some(nulls()),
                )
                .map_err(|e| e.to_string())?,
            )
        }
        DataType::Map(entry, sorted) => {
            let DataType::Struct(kv) = entry.data_type() else {
                return Err("a map's entries are not a struct".to_string());
            };
            let mut lengths = Vec::with_capacity(values.len());
            let mut keys: Vec<&Datum> = Vec::new();
            let mut vals: Vec<&Datum> = Vec::new();
            for d in values {
                match d {
                    Datum::Map(m) => {
                        lengths.push(m.len());
                        for (k, v) in m {
                            keys.push(k);
                            vals.push(v);
                        }
                    }
                    _ => lengths.push(0),
                }
            }
            let (Some(kf), Some(vf)) = (kv.first(), kv.get(1)) else {
                return Err("a map's entries lack a key or a value".to_string());
            };
            let entries = StructArray::try_new(
                kv.clone(),
                vec![
                    column(kf.data_type(), &keys)?,
                    column(vf.data_type(), &vals)?,
                ],
                None,
            )
            .map_err(|e| e.to_string())?;
            Arc::new(
                MapArray::try_new(
                    Arc::clone(entry),
                    OffsetBuffer::from_lengths(lengths),
                    entries,
                    Some(nulls()),
                    *sorted,
                )
                .map_err(|e| e.to_string())?,
            )
        }
        other => return Err(format!("no column of Arrow type {other}")),
    })
}

fn primitive<T: ArrowPrimitiveType>(
    values: &[&Datum],
    f: impl Fn(&Datum) -> Option<T::Native>,
) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::from_iter(values.iter().map(|d| f(d))))
}

/// The bytes of the strings and binaries among `values`: a column sized once, not grown by
/// doubling (each doubling copies it).
fn total(values: &[&Datum]) -> usize {
    values
        .iter()
        .map(|d| match d {
            Datum::Str(s) => s.len(),
            Datum::Bytes(b) => b.len(),
            _ => 0,
        })
        .sum()
}

fn text(d: &Datum) -> Option<&str> {
    match d {
        Datum::Str(s) => Some(s),
        _ => None,
    }
}

fn bytes(d: &Datum) -> Option<&[u8]> {
    match d {
        Datum::Bytes(b) => Some(b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    use arrow_schema::{Field, Fields};

    #[test]
    fn structs_lists_and_maps() {
        let st = DataType::Struct(Fields::from(vec![
            Field::new("id", DataType::Int64, true),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("element", DataType::Utf8, true))),
                true,
            ),
        ]));
        let a = Datum::Fields(vec![
            Datum::Long(1),
            Datum::List(vec![Datum::Str("x".into()), Datum::Str("y".into())]),
        ]);
        let b = Datum::Null;
        let c = Datum::Fields(vec![Datum::Null, Datum::List(vec![])]);
        let col = column(&st, &[&a, &b, &c]).expect("a column");
        let s = col.as_struct();
        assert_eq!(s.len(), 3);
        assert!(s.is_null(1) && !s.is_null(2));
        assert_eq!(s.column(0).as_primitive::<Int64Type>().value(0), 1);
        assert!(s.column(0).is_null(2));
        let tags = s.column(1).as_list::<i32>();
        assert_eq!(tags.value(0).len(), 2);
        assert_eq!(tags.value(2).len(), 0);
    }
}
