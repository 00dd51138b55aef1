//! JSON Schema: checked against its draft's meta-schema and compiled by `jsonschema` (drafts 4
//! to 2020-12 by `$schema`, draft 7 when it names none, as Confluent's registry and clients
//! assume), with references resolved only from the registry (never fetched from a URL or a file).
//!
//! Compatibility follows Confluent's model: BACKWARD means every document valid under the old
//! schema is valid under the new one. The check walks both schemas side by side and names each
//! change that can break that, with Confluent's error types (`TYPE_CHANGED`,
//! `REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL`, ...); FORWARD is the same walk with the
//! schemas swapped. An object is "open" when it allows properties it does not name
//! (`additionalProperties` absent or true): adding an optional property to an open object is
//! incompatible (an old document may have had that key with any value), as in Confluent's
//! default (strict) policy.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// A parsed JSON Schema.
pub struct JsonSchema {
    root: Value,
    /// The referenced schemas by the name the referring schema uses.
    references: BTreeMap<String, Value>,
    validator: jsonschema::Validator,
    canonical: String,
}

/// Resolves `$ref`s to the referenced schemas, by name; nothing else (no URL, no file).
struct References(BTreeMap<String, Value>);

impl jsonschema::Retrieve for References {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let wanted = uri.as_str();
        self.0
            .iter()
            .find(|(name, _)| {
                wanted == name.as_str()
                    || wanted
                        .rsplit('/')
                        .next()
                        .is_some_and(|last| last == name.rsplit('/').next().unwrap_or(name))
            })
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("{wanted} is not a reference of this schema").into())
    }
}

impl JsonSchema {
    /// Parses `text`; `references` are (name as `$ref` writes it, schema text).
    pub fn parse(text: &str, references: &[(String, String)]) -> Result<JsonSchema, String> {
        let root: Value = serde_json::from_str(text).map_err(|e| format!("Invalid JSON: {e}"))?;
        if !root.is_object() && !root.is_boolean() {
            return Err("a JSON Schema is an object or a boolean".to_string());
        }
        let mut refs = BTreeMap::new();
        for (name, t) in references {
            let v: Value = serde_json::from_str(t)
                .map_err(|e| format!("reference {name} is not JSON: {e}"))?;
            refs.insert(name.clone(), v);
        }
        jsonschema::meta::validate(&with_default_draft(&root))
            .map_err(|e| format!("not a valid JSON Schema: {e}"))?;
        let validator = jsonschema::options()
            .with_draft(draft_of(&root))
            .with_retriever(References(refs.clone()))
            .build(&root)
            .map_err(|e| e.to_string())?;
        Ok(JsonSchema {
            canonical: root.to_string(),
            root,
            references: refs,
            validator,
        })
    }

    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The schema document.
    pub fn root(&self) -> &Value {
        &self.root
    }

    /// A referenced schema, by the name `$ref` gives it.
    pub fn reference(&self, name: &str) -> Option<&Value> {
        self.references.get(name)
    }

    /// The schema's `title`, its record name for the record name strategies.
    pub fn title(&self) -> Option<String> {
        self.root
            .get("title")
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// Checks that `payload` is a JSON document valid under the schema.
    pub fn decode(&self, payload: &[u8]) -> Result<(), String> {
        let doc: Value = serde_json::from_slice(payload).map_err(|e| format!("not JSON: {e}"))?;
        self.validator
            .validate(&doc)
            .map_err(|e| format!("{} (at {})", e, e.instance_path()))
    }

    /// Why documents valid under `old` may not be valid under `self` (BACKWARD, `self` new), in
    /// Confluent's words; `reader_is_new` false swaps the roles (FORWARD).
    pub fn read_errors(&self, old: &JsonSchema, reader_is_new: bool) -> Vec<String> {
        let (wider, narrower) = if reader_is_new {
            (self, old)
        } else {
            (old, self)
        };
        let mut diff = Diff {
            narrower,
            wider,
            errors: Vec::new(),
            depth: 0,
        };
        diff.compare(&narrower.root, &wider.root, "#");
        diff.errors
    }
}

/// The draft a schema declares (`$schema`), else draft 7.
fn draft_of(root: &Value) -> jsonschema::Draft {
    use jsonschema::Draft;
    let declared = root
        .get("$schema")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if declared.contains("draft-04") {
        Draft::Draft4
    } else if declared.contains("draft-06") {
        Draft::Draft6
    } else if declared.contains("2019-09") {
        Draft::Draft201909
    } else if declared.contains("2020-12") {
        Draft::Draft202012
    } else {
        Draft::Draft7
    }
}

/// The schema with `$schema` set to draft 7 when it names none (what the meta-schema check
/// needs to know the draft).
fn with_default_draft(root: &Value) -> Value {
    match root {
        Value::Object(m) if !m.contains_key("$schema") => {
            let mut m = m.clone();
            m.insert(
                "$schema".into(),
                Value::String("http://json-schema.org/draft-07/schema#".into()),
            );
            Value::Object(m)
        }
        other => other.clone(),
    }
}

/// Walks a narrower schema (whose documents must stay valid) and a wider one side by side.
struct Diff<'a> {
    narrower: &'a JsonSchema,
    wider: &'a JsonSchema,
    errors: Vec<String>,
    /// `$ref`s followed so far on this path (a recursive schema stops somewhere).
    depth: usize,
}

/// The JSON types a schema allows (`None`: any).
fn types(s: &Map<String, Value>) -> Option<BTreeSet<String>> {
    match s.get("type") {
        Some(Value::String(t)) => Some([t.clone()].into()),
        Some(Value::Array(ts)) => Some(
            ts.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        ),
        _ => None,
    }
}

fn number(s: &Map<String, Value>, k: &str) -> Option<f64> {
    s.get(k).and_then(Value::as_f64)
}

/// Whether an object allows properties it does not name.
fn open(s: &Map<String, Value>) -> bool {
    !matches!(s.get("additionalProperties"), Some(Value::Bool(false)))
        && !s.contains_key("patternProperties")
        && !matches!(s.get("unevaluatedProperties"), Some(Value::Bool(false)))
}

fn required(s: &Map<String, Value>) -> BTreeSet<String> {
    s.get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The empty schema (or `true`): anything.
fn anything(v: &Value) -> bool {
    matches!(v, Value::Bool(true)) || v.as_object().is_some_and(Map::is_empty)
}

impl<'a> Diff<'a> {
    fn error(&mut self, kind: &str, path: &str) {
        let description = match kind {
            "TYPE_CHANGED" => format!("The type of the schema at path '{path}' has changed"),
            "TYPE_NARROWED" => format!("The type of the schema at path '{path}' was narrowed"),
            "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL" | "REQUIRED_ATTRIBUTE_ADDED" => {
                format!("A required property was added at path '{path}'")
            }
            "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL" => {
                format!("An optional property was added to an open content model at path '{path}'")
            }
            "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" => {
                format!("A property was removed from a closed content model at path '{path}'")
            }
            "ADDITIONAL_PROPERTIES_REMOVED" | "ADDITIONAL_PROPERTIES_NARROWED" => {
                format!("Additional properties were narrowed at path '{path}'")
            }
            "ENUM_ARRAY_NARROWED" => format!("Enum values were removed at path '{path}'"),
            "SUM_TYPE_NARROWED" => format!("A oneOf/anyOf branch was removed at path '{path}'"),
            "PRODUCT_TYPE_EXTENDED" => format!("An allOf schema was added at path '{path}'"),
            "REFERENCE_CHANGED" => format!("A $ref changed at path '{path}'"),
            _ => format!("A constraint was added or tightened at path '{path}'"),
        };
        self.errors.push(format!(
            "{{errorType:\"{kind}\", description:\"{description}\"}}"
        ));
    }

    /// Follows a `$ref` (local `#/...` pointers, and the schema's references by name).
    fn resolve<'b>(&self, s: &'b Value, side: &'a JsonSchema) -> &'b Value
    where
        'a: 'b,
    {
        let Some(r) = s.get("$ref").and_then(Value::as_str) else {
            return s;
        };
        if let Some(pointer) = r.strip_prefix('#') {
            return side.root.pointer(pointer).unwrap_or(s);
        }
        side.references
            .iter()
            .find(|(name, _)| name.as_str() == r || r.ends_with(name.as_str()))
            .map_or(s, |(_, v)| v)
    }

    /// Every document valid under `narrow` must be valid under `wide`.
    fn compare<'b>(&mut self, narrow: &'b Value, wide: &'b Value, path: &str)
    where
        'a: 'b,
    {
        // Equal schemas admit the same documents, unless their references name different
        // things on each side.
        let refers = narrow.get("$ref").is_some();
        if anything(wide) || (narrow == wide && !refers) {
            return;
        }
        if self.depth > 32 {
            return;
        }
        self.depth += 1;
        let narrow = self.resolve(narrow, self.narrower);
        let wide = self.resolve(wide, self.wider);
        self.depth -= 1;
        if anything(wide) || narrow == wide {
            return;
        }
        let (Some(n), Some(w)) = (narrow.as_object(), wide.as_object()) else {
            // `false` accepts nothing: anything is wider. Anything else narrower than `true`.
            if narrow != &Value::Bool(false) {
                self.error("TYPE_NARROWED", path);
            }
            return;
        };
        self.depth += 1;
        self.types(n, w, path);
        self.constraints(n, w, path);
        self.enums(n, w, path);
        self.objects(n, w, path);
        self.arrays(n, w, path);
        self.combinations(narrow, n, w, path);
        self.depth -= 1;
    }

    fn types(&mut self, n: &Map<String, Value>, w: &Map<String, Value>, path: &str) {
        let Some(wide) = types(w) else {
            return;
        };
        let Some(narrow) = types(n) else {
            self.error("TYPE_NARROWED", path);
            return;
        };
        // Every type the narrow schema allows must be allowed (an integer is a number).
        let missing = narrow
            .iter()
            .any(|t| !(wide.contains(t) || (t == "integer" && wide.contains("number"))));
        if missing {
            self.error("TYPE_CHANGED", path);
        }
    }

    fn constraints(&mut self, n: &Map<String, Value>, w: &Map<String, Value>, path: &str) {
        // Upper bounds may grow or go; lower bounds may shrink or go; none may be added.
        for k in [
            "maxLength",
            "maximum",
            "exclusiveMaximum",
            "maxItems",
            "maxProperties",
        ] {
            if let Some(wv) = number(w, k) {
                if number(n, k).is_none_or(|nv| wv < nv) {
                    self.error(&format!("{}_ADDED_OR_DECREASED", snake(k)), path);
                }
            }
        }
        for k in [
            "minLength",
            "minimum",
            "exclusiveMinimum",
            "minItems",
            "minProperties",
        ] {
            if let Some(wv) = number(w, k) {
                if number(n, k).is_none_or(|nv| wv > nv) {
                    self.error(&format!("{}_ADDED_OR_INCREASED", snake(k)), path);
                }
            }
        }
        if let Some(wp) = w.get("pattern") {
            if n.get("pattern") != Some(wp) {
                self.error("PATTERN_ADDED_OR_CHANGED", path);
            }
        }
        if let Some(wm) = number(w, "multipleOf") {
            // The new multiple must divide the old one.
            let ok = number(n, "multipleOf").is_some_and(|nm| (nm / wm).fract() == 0.0);
            if !ok {
                self.error("MULTIPLE_OF_ADDED_OR_CHANGED", path);
            }
        }
        if w.get("uniqueItems") == Some(&Value::Bool(true))
            && n.get("uniqueItems") != Some(&Value::Bool(true))
        {
            self.error("UNIQUE_ITEMS_ADDED", path);
        }
        if let Some(c) = w.get("const") {
            if n.get("const") != Some(c) {
                self.error("CONST_ADDED_OR_CHANGED", path);
            }
        }
    }

    fn enums(&mut self, n: &Map<String, Value>, w: &Map<String, Value>, path: &str) {
        let Some(wide) = w.get("enum").and_then(Value::as_array) else {
            return;
        };
        let ok = n
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|narrow| narrow.iter().all(|v| wide.contains(v)));
        if !ok {
            self.error("ENUM_ARRAY_NARROWED", path);
        }
    }

    fn objects<'b>(&mut self, n: &'b Map<String, Value>, w: &'b Map<String, Value>, path: &str)
    where
        'a: 'b,
    {
        let empty = Map::new();
        let np = n
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let wp = w
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        for (name, ns) in np {
            let at = format!("{path}/properties/{name}");
            match wp.get(name) {
                Some(ws) => self.compare(ns, ws, &at),
                None if !open(w) => {
                    // The wider schema does not name it: its extra-property rule must take it.
                    match w.get("additionalProperties") {
                        Some(extra) if extra.is_object() => self.compare(ns, extra, &at),
                        _ => self.error("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", &at),
                    }
                }
                None => {}
            }
        }
        for (name, ws) in wp {
            if np.contains_key(name) || anything(ws) {
                continue;
            }
            let at = format!("{path}/properties/{name}");
            if open(n) {
                // An old document may have had this key with any value.
                self.error("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", &at);
            } else if let Some(extra) = n.get("additionalProperties").filter(|e| e.is_object()) {
                self.compare(extra, ws, &at);
            }
        }
        let (nr, wr) = (required(n), required(w));
        for name in wr.difference(&nr) {
            let has_default = wp.get(name).is_some_and(|s| s.get("default").is_some());
            if !has_default {
                self.error(
                    "REQUIRED_ATTRIBUTE_ADDED",
                    &format!("{path}/properties/{name}"),
                );
            }
        }
        match (n.get("additionalProperties"), w.get("additionalProperties")) {
            (_, None | Some(Value::Bool(true))) => {}
            (Some(Value::Bool(false)), _) => {}
            (None | Some(Value::Bool(true)), Some(Value::Bool(false))) => {
                self.error("ADDITIONAL_PROPERTIES_REMOVED", path)
            }
            (None | Some(Value::Bool(true)), Some(_)) => {
                self.error("ADDITIONAL_PROPERTIES_NARROWED", path)
            }
            (Some(ne), Some(we)) => self.compare(ne, we, &format!("{path}/additionalProperties")),
        }
    }

    fn arrays<'b>(&mut self, n: &'b Map<String, Value>, w: &'b Map<String, Value>, path: &str)
    where
        'a: 'b,
    {
        match (n.get("items"), w.get("items")) {
            (_, None) => {}
            (None, Some(wi)) if !anything(wi) => self.error("ITEMS_ADDED", path),
            (Some(ni), Some(wi)) if ni.is_object() || ni.is_boolean() => {
                self.compare(ni, wi, &format!("{path}/items"))
            }
            (Some(Value::Array(nt)), Some(Value::Array(wt))) => {
                for (i, (ni, wi)) in nt.iter().zip(wt).enumerate() {
                    self.compare(ni, wi, &format!("{path}/items/{i}"));
                }
                if wt.len() > nt.len() {
                    self.error("ITEMS_ADDED", path);
                }
            }
            _ => {}
        }
    }

    /// Whether every document of `narrow` is one of `wide` (no error found).
    fn fits<'b>(&self, narrow: &'b Value, wide: &'b Value, path: &str) -> bool
    where
        'a: 'b,
    {
        let mut probe = Diff {
            narrower: self.narrower,
            wider: self.wider,
            errors: Vec::new(),
            depth: self.depth,
        };
        probe.compare(narrow, wide, path);
        probe.errors.is_empty()
    }

    fn combinations<'b>(
        &mut self,
        whole: &'b Value,
        n: &'b Map<String, Value>,
        w: &'b Map<String, Value>,
        path: &str,
    ) where
        'a: 'b,
    {
        for k in ["oneOf", "anyOf"] {
            let Some(wide) = w.get(k).and_then(Value::as_array) else {
                continue;
            };
            match n.get(k).and_then(Value::as_array) {
                // Each old branch must fit a new one.
                Some(branches) => {
                    for (i, branch) in branches.iter().enumerate() {
                        let at = format!("{path}/{k}/{i}");
                        if !wide.iter().any(|wb| self.fits(branch, wb, &at)) {
                            self.error("SUM_TYPE_NARROWED", &at);
                        }
                    }
                }
                // No branches before: the old schema as a whole must fit one.
                None => {
                    let mut plain = n.clone();
                    plain.remove(k);
                    let plain = Value::Object(plain);
                    let fits = wide.iter().any(|wb| self.fits(&plain, wb, path));
                    if !fits && whole != &Value::Bool(false) {
                        self.error("SUM_TYPE_NARROWED", path);
                    }
                }
            }
        }
        if let Some(wide) = w.get("allOf").and_then(Value::as_array) {
            let narrow = n.get("allOf").and_then(Value::as_array);
            for (i, wb) in wide.iter().enumerate() {
                if !narrow.is_some_and(|nb| nb.contains(wb)) {
                    self.error("PRODUCT_TYPE_EXTENDED", &format!("{path}/allOf/{i}"));
                }
            }
        }
    }
}

/// `maxLength` as Confluent's error types spell it: `MAX_LENGTH`.
fn snake(k: &str) -> String {
    let mut out = String::new();
    for c in k.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests;
