//! A typed layout's cycle (`value_schema_id_prefix`, `value_schema_latest`): values decoded
//! with their schemas from the registry, the table created or evolved for them, bad records to
//! the dead-letter table (or dropped), the rest appended. The rest of a cycle is the parent's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use iceberg::spec::{DataFile, Type};
use iceberg::table::Table;
use iceberg::transaction::{AddColumn, ApplyTransactionAction, Transaction};
use iceberg::TableIdent;
use weir_registry::format::Parsed;

use super::{Cycle, InvalidAction, Mode, Schemas, TopicSpec, Translator};
use crate::key_value::{self, Row};
use crate::progress::{self, Progress};
use crate::typed::{self, Datum, Framing, Ids};

/// A typed value's schema, as the cycle found it: the schema and its Iceberg type, or why it
/// has none.
type Found = Result<(Arc<Parsed>, Type), String>;

/// A schema and its Iceberg type, or why it has none.
fn typed_schema(parsed: Arc<Parsed>) -> Found {
    let ty = typed::value_type(&parsed, &mut Ids::from(key_value::field::FIRST_VALUE_FIELD))?;
    Ok((parsed, ty))
}

/// `row`'s value decoded with the schema it names (`latest`: bare values of that schema).
fn decode(row: &Row, latest: Option<u32>, found: &HashMap<u32, Found>) -> Result<Datum, String> {
    let Some(value) = row.value.as_deref() else {
        // A tombstone: a row with a null value.
        return Ok(Datum::Null);
    };
    let (id, data, framing) = match latest {
        Some(id) => (id, value, Framing::Bare),
        None => {
            let (id, data) = typed::split_prefix(value)?;
            (id, data, Framing::IdPrefix)
        }
    };
    match found.get(&id) {
        Some(Ok((parsed, _))) => typed::decode(parsed, data, framing)
            .map_err(|e| format!("the value does not decode with schema {id}: {e}")),
        Some(Err(reason)) => Err(reason.clone()),
        None => Err(format!("schema {id} not found")),
    }
}

impl Translator {
    /// A typed layout's cycle from the rows read: the table created or evolved for the
    /// values' schemas, values decoded and written a batch at a time, bad records to the
    /// dead-letter table (or dropped), the rest committed. `Ok(Err(cycle))`: the cycle ends
    /// there (paused, or the dead-letter table moved first).
    pub(super) async fn typed(
        &self,
        t: &TopicSpec,
        ident: &TableIdent,
        table: Option<Table>,
        rows: Vec<Row>,
        now: &Progress,
    ) -> Result<Result<bool, Cycle>, String> {
        let schemas = self
            .schemas
            .as_ref()
            .ok_or("this broker has no schema registry for the typed layouts")?;
        let (found, latest) = self.schemas_of(t, schemas.as_ref(), &rows).await?;
        let types: BTreeMap<u32, Type> = found
            .iter()
            .filter_map(|(id, f)| f.as_ref().ok().map(|(_, ty)| (*id, ty.clone())))
            .collect();
        // The table, created with the first schema's type, then evolved for each schema.
        let table = match table {
            Some(table) => table,
            None => {
                let first = types
                    .values()
                    .next()
                    .cloned()
                    .unwrap_or_else(|| Type::Struct(iceberg::spec::StructType::new(vec![])));
                let schema = key_value::schema_with(first, false).map_err(|e| e.to_string())?;
                self.create(t, ident, schema).await?
            }
        };
        let table = match self.evolve(table, &types).await? {
            Ok(table) => table,
            Err(reason) => return Ok(Err(Cycle::Paused { reason })),
        };
        let (files, kept, mut bad) = self.write_typed(&table, &rows, &found, latest).await?;
        if !bad.is_empty() && t.invalid == InvalidAction::DeadLetter {
            // The dead letters are committed first: a bad record is in their table once too.
            let moved = match self.dead_letters(t, ident, &mut bad, now).await {
                Ok(written) => !written,
                Err(e) => {
                    self.drop_files(table, super::paths(&files)).await;
                    return Err(e);
                }
            };
            if moved {
                self.drop_files(table, super::paths(&files)).await;
                return Ok(Err(Cycle::Conflict));
            }
        }
        let written = self.commit(t, table, files, kept, now).await?;
        if written && t.invalid == InvalidAction::Drop {
            self.meters.invalid_dropped.add(bad.len() as u64);
            if let Some((row, reason)) = bad.first() {
                tracing::warn!(topic = %t.name, partition = row.partition, offset = row.offset, %reason,
                    records = bad.len(), "iceberg: records that do not fit the table dropped");
            }
        }
        Ok(Ok(written))
    }

    /// The schemas `rows`' values name (by id), each with its Iceberg type or why it has none,
    /// and the id of the subject's latest schema for `value_schema_latest`.
    async fn schemas_of(
        &self,
        t: &TopicSpec,
        schemas: &dyn Schemas,
        rows: &[Row],
    ) -> Result<(HashMap<u32, Found>, Option<u32>), String> {
        let mut found: HashMap<u32, Found> = HashMap::new();
        if let Mode::SchemaLatest { subject } = &t.mode {
            let subject = subject
                .clone()
                .unwrap_or_else(|| format!("{}-value", t.name));
            let (id, parsed) = schemas
                .latest(&subject)
                .await
                .map_err(|e| format!("the latest schema of {subject}: {e}"))?;
            found.insert(id, typed_schema(parsed));
            return Ok((found, Some(id)));
        }
        for value in rows.iter().filter_map(|r| r.value.as_deref()) {
            // A value without a prefix is a bad record, found again when it is decoded.
            let Ok((id, _)) = typed::split_prefix(value) else {
                continue;
            };
            if let std::collections::hash_map::Entry::Vacant(slot) = found.entry(id) {
                slot.insert(match schemas.by_id(id).await {
                    Ok(parsed) => typed_schema(parsed),
                    Err(e) => Err(format!("schema {id}: {e}")),
                });
            }
        }
        Ok((found, None))
    }

    /// `rows`' values decoded and conformed to `table`'s value column, written a batch at a
    /// time (a cycle's decoded values at once would be hundreds of MiB): the data files, the
    /// number of rows in them, and the bad records with why.
    async fn write_typed(
        &self,
        table: &Table,
        rows: &[Row],
        found: &HashMap<u32, Found>,
        latest: Option<u32>,
    ) -> Result<(Vec<DataFile>, usize, Vec<(Row, String)>), String> {
        let arrow = super::arrow_schema(table)?;
        let value_type = table
            .metadata()
            .current_schema()
            .field_by_name("value")
            .map(|f| (*f.field_type).clone())
            .ok_or_else(|| format!("{} has no value column", table.identifier()))?;
        let value_arrow = arrow
            .field_with_name("value")
            .map_err(|e| e.to_string())?
            .data_type()
            .clone();
        let mut bad = Vec::new();
        let mut kept_rows = 0;
        let batches = key_value::chunks(rows, self.settings.batch_bytes)
            .into_iter()
            .filter_map(|range| {
                let mut kept = Vec::with_capacity(range.len());
                let mut values = Vec::with_capacity(range.len());
                for row in &rows[range] {
                    let datum = decode(row, latest, found)
                        .and_then(|d| typed::conform(d, &value_type, "value"));
                    match datum {
                        Ok(d) => {
                            kept.push(row.clone());
                            values.push(d);
                        }
                        Err(reason) => bad.push((row.clone(), reason)),
                    }
                }
                if kept.is_empty() {
                    return None;
                }
                kept_rows += kept.len();
                let refs: Vec<&Datum> = values.iter().collect();
                let column = typed::columns::column(&value_arrow, &refs).map_err(|e| {
                    iceberg::Error::new(
                        iceberg::ErrorKind::DataInvalid,
                        format!("the value column: {e}"),
                    )
                });
                Some(column.and_then(|c| key_value::batch_with(&arrow, &kept, Some(c), None)))
            });
        let files = self.write(table, batches).await?;
        Ok((files, kept_rows, bad))
    }

    /// The table with the columns the schemas' types add; `Ok(Err(reason))`: a schema's type
    /// cannot be taken (translation pauses).
    async fn evolve(
        &self,
        mut table: Table,
        types: &BTreeMap<u32, Type>,
    ) -> Result<Result<Table, String>, String> {
        for (id, ty) in types {
            let Some(have) = table.metadata().current_schema().field_by_name("value") else {
                return Ok(Err("the table has no value column".to_string()));
            };
            let adds = match typed::evolve::additions(&have.field_type, ty, "value") {
                Ok(adds) => adds,
                Err(reason) => return Ok(Err(format!("schema {id}: {reason}"))),
            };
            if adds.is_empty() {
                continue;
            }
            let names: Vec<String> = adds
                .iter()
                .map(|a| format!("{}.{}", a.parent, a.name))
                .collect();
            let tx = Transaction::new(&table);
            let mut update = tx.update_schema();
            for a in adds {
                update = update.add_column(
                    AddColumn::builder()
                        .parent(a.parent)
                        .name(a.name)
                        .field_type(a.ty)
                        .build(),
                );
            }
            table = update
                .apply(tx)
                .map_err(|e| e.to_string())?
                .commit(&*self.catalog)
                .await
                .map_err(|e| format!("evolving the table for schema {id}: {e}"))?;
            self.meters.evolutions.inc();
            tracing::info!(table = %table.identifier(), schema = id, columns = ?names, "iceberg: columns added");
        }
        Ok(Ok(table))
    }

    /// Appends the bad records the dead-letter table lacks to it, with the cycle's offsets as
    /// its progress; `false`: it moved first.
    async fn dead_letters(
        &self,
        t: &TopicSpec,
        ident: &TableIdent,
        bad: &mut Vec<(Row, String)>,
        now: &Progress,
    ) -> Result<bool, String> {
        let dlq = self.ident(&format!("{}_dlq", ident.name()));
        let table = match self.load(&dlq).await? {
            Some(table) => table,
            None => {
                let schema = key_value::dead_letter_schema().map_err(|e| e.to_string())?;
                self.create(t, &dlq, schema).await?
            }
        };
        let had = progress::committed(&table.metadata_ref(), &self.settings.cluster, &t.topic_id);
        // What an earlier cycle put there and the main table did not take then.
        bad.retain(|(r, _)| r.offset >= had.offsets.get(&r.partition).copied().unwrap_or(0));
        if bad.is_empty() {
            return Ok(true);
        }
        let mut offsets = had.offsets.clone();
        offsets.extend(now.offsets.iter().filter(|(p, _)| t.partitions.contains(p)));
        let progress = Progress { offsets, ..had };
        let rows: Vec<Row> = bad.iter().map(|(r, _)| r.clone()).collect();
        let reasons: Vec<String> = bad.iter().map(|(_, why)| why.clone()).collect();
        let written = self
            .append(t, table, &rows, Some(&reasons), &progress)
            .await?;
        if written {
            self.meters.dead_letters.add(rows.len() as u64);
        }
        Ok(written)
    }
}
