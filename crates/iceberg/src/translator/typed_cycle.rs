//! A typed layout's cycle (`value_schema_id_prefix`, `value_schema_latest`): values decoded
//! with their schemas from the registry, the table created or evolved for them, bad records to
//! the dead-letter table (or dropped), the rest appended. The rest of a cycle is the parent's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use iceberg::spec::Type;
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

impl Translator {
    /// A typed layout's cycle from the rows read: values decoded, the table created or
    /// evolved for their schemas, bad records to the dead-letter table (or dropped), the rest
    /// appended. `Ok(Err(cycle))`: the cycle ends there (paused, or the dead-letter table
    /// moved first).
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
        let (good, mut bad, types) = self.decode_values(t, schemas.as_ref(), rows).await?;
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
        let value_type = table
            .metadata()
            .current_schema()
            .field_by_name("value")
            .map(|f| (*f.field_type).clone())
            .ok_or_else(|| format!("{ident} has no value column"))?;
        let mut kept = Vec::with_capacity(good.len());
        let mut values = Vec::with_capacity(good.len());
        for (row, datum) in good {
            match typed::conform(datum, &value_type, "value") {
                Ok(d) => {
                    kept.push(row);
                    values.push(d);
                }
                Err(reason) => bad.push((row, reason)),
            }
        }
        if !bad.is_empty()
            && t.invalid == InvalidAction::DeadLetter
            && !self.dead_letters(t, ident, &mut bad, now).await?
        {
            return Ok(Err(Cycle::Conflict));
        }
        let value_column = if kept.is_empty() {
            None
        } else {
            let arrow = iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
                .map_err(|e| e.to_string())?;
            let field = arrow.field_with_name("value").map_err(|e| e.to_string())?;
            let refs: Vec<&Datum> = values.iter().collect();
            Some(typed::columns::column(field.data_type(), &refs)?)
        };
        let written = self
            .append(t, table, &kept, value_column, None, now)
            .await?;
        if written && t.invalid == InvalidAction::Drop {
            self.meters.invalid_dropped.add(bad.len() as u64);
            if let Some((row, reason)) = bad.first() {
                tracing::warn!(topic = %t.name, partition = row.partition, offset = row.offset, %reason,
                    records = bad.len(), "iceberg: records that do not fit the table dropped");
            }
        }
        Ok(Ok(written))
    }

    /// Each row's value decoded with its schema: the good ones, the bad ones with why, and the
    /// Iceberg type of each schema met (by id).
    #[allow(clippy::type_complexity)]
    async fn decode_values(
        &self,
        t: &TopicSpec,
        schemas: &dyn Schemas,
        rows: Vec<Row>,
    ) -> Result<(Vec<(Row, Datum)>, Vec<(Row, String)>, BTreeMap<u32, Type>), String> {
        let mut found: HashMap<u32, Found> = HashMap::new();
        let latest = match &t.mode {
            Mode::SchemaLatest { subject } => {
                let subject = subject
                    .clone()
                    .unwrap_or_else(|| format!("{}-value", t.name));
                let (id, parsed) = schemas
                    .latest(&subject)
                    .await
                    .map_err(|e| format!("the latest schema of {subject}: {e}"))?;
                found.insert(id, typed_schema(parsed));
                Some(id)
            }
            _ => None,
        };
        let mut good = Vec::with_capacity(rows.len());
        let mut bad = Vec::new();
        for row in rows {
            let Some(value) = row.value.clone() else {
                // A tombstone: a row with a null value.
                good.push((row, Datum::Null));
                continue;
            };
            let (id, data, framing) = match latest {
                Some(id) => (id, &value[..], Framing::Bare),
                None => match typed::split_prefix(&value) {
                    Ok((id, data)) => (id, data, Framing::IdPrefix),
                    Err(reason) => {
                        bad.push((row, reason));
                        continue;
                    }
                },
            };
            if let std::collections::hash_map::Entry::Vacant(slot) = found.entry(id) {
                slot.insert(match schemas.by_id(id).await {
                    Ok(parsed) => typed_schema(parsed),
                    Err(e) => Err(format!("schema {id}: {e}")),
                });
            }
            let decoded = match found.get(&id) {
                Some(Ok((parsed, _))) => typed::decode(parsed, data, framing)
                    .map_err(|e| format!("the value does not decode with schema {id}: {e}")),
                Some(Err(reason)) => Err(reason.clone()),
                None => Err(format!("schema {id} not found")),
            };
            match decoded {
                Ok(d) => good.push((row, d)),
                Err(reason) => bad.push((row, reason)),
            }
        }
        let types = found
            .into_iter()
            .filter_map(|(id, f)| f.ok().map(|(_, ty)| (id, ty)))
            .collect();
        Ok((good, bad, types))
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
            .append(t, table, &rows, None, Some(&reasons), &progress)
            .await?;
        if written {
            self.meters.dead_letters.add(rows.len() as u64);
        }
        Ok(written)
    }
}
