//! A `FileDescriptorProto` printed as `.proto` text: the registry's canonical text for a
//! Protobuf schema, whether it arrived as text or as a base64 descriptor (what Confluent's
//! Python serializer registers), so that both forms of one schema are one schema.

use std::fmt::Write;

use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
    ServiceDescriptorProto,
};

/// The file as `.proto` text.
pub fn print(file: &FileDescriptorProto) -> String {
    let mut out = String::new();
    let syntax = file.syntax.as_deref().unwrap_or("proto2");
    let syntax = if syntax.is_empty() { "proto2" } else { syntax };
    let _ = writeln!(out, "syntax = \"{syntax}\";");
    if let Some(p) = file.package.as_deref().filter(|p| !p.is_empty()) {
        let _ = writeln!(out, "package {p};");
    }
    for (i, dep) in file.dependency.iter().enumerate() {
        let i = i as i32;
        let kind = if file.public_dependency.contains(&i) {
            "public "
        } else if file.weak_dependency.contains(&i) {
            "weak "
        } else {
            ""
        };
        let _ = writeln!(out, "import {kind}\"{dep}\";");
    }
    if let Some(o) = &file.options {
        let strings = [
            ("java_package", &o.java_package),
            ("java_outer_classname", &o.java_outer_classname),
            ("go_package", &o.go_package),
            ("objc_class_prefix", &o.objc_class_prefix),
            ("csharp_namespace", &o.csharp_namespace),
            ("swift_prefix", &o.swift_prefix),
            ("php_class_prefix", &o.php_class_prefix),
            ("php_namespace", &o.php_namespace),
            ("ruby_package", &o.ruby_package),
        ];
        for (name, v) in strings {
            if let Some(v) = v {
                let _ = writeln!(out, "option {name} = \"{}\";", escape(v));
            }
        }
        let bools = [
            ("java_multiple_files", o.java_multiple_files),
            ("java_string_check_utf8", o.java_string_check_utf8),
            ("cc_enable_arenas", o.cc_enable_arenas),
            ("deprecated", o.deprecated),
        ];
        for (name, v) in bools {
            if let Some(v) = v {
                let _ = writeln!(out, "option {name} = {v};");
            }
        }
        if let Some(o) = o.optimize_for {
            let mode = match o {
                2 => "CODE_SIZE",
                3 => "LITE_RUNTIME",
                _ => "SPEED",
            };
            let _ = writeln!(out, "option optimize_for = {mode};");
        }
    }
    let proto3 = syntax == "proto3";
    for m in &file.message_type {
        message(&mut out, m, 0, proto3);
    }
    for e in &file.enum_type {
        enumeration(&mut out, e, 0);
    }
    for s in &file.service {
        service(&mut out, s);
    }
    extensions(&mut out, &file.extension, 0, proto3);
    out
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn message(out: &mut String, m: &DescriptorProto, depth: usize, proto3: bool) {
    indent(out, depth);
    let _ = writeln!(out, "message {} {{", m.name());
    if m.options.as_ref().and_then(|o| o.deprecated) == Some(true) {
        indent(out, depth + 1);
        out.push_str("option deprecated = true;\n");
    }
    // Fields of a real oneof are printed inside it, at the first member's place.
    let mut printed_oneofs = Vec::new();
    for f in &m.field {
        match f.oneof_index.filter(|_| !f.proto3_optional()) {
            Some(i) => {
                if printed_oneofs.contains(&i) {
                    continue;
                }
                printed_oneofs.push(i);
                let name = m
                    .oneof_decl
                    .get(i as usize)
                    .map(|o| o.name().to_string())
                    .unwrap_or_default();
                indent(out, depth + 1);
                let _ = writeln!(out, "oneof {name} {{");
                for member in m.field.iter().filter(|g| g.oneof_index == Some(i)) {
                    field(out, m, member, depth + 2, proto3, true);
                }
                indent(out, depth + 1);
                out.push_str("}\n");
            }
            None => field(out, m, f, depth + 1, proto3, false),
        }
    }
    for nested in &m.nested_type {
        if nested.options.as_ref().and_then(|o| o.map_entry) == Some(true) {
            continue;
        }
        message(out, nested, depth + 1, proto3);
    }
    for e in &m.enum_type {
        enumeration(out, e, depth + 1);
    }
    for r in &m.extension_range {
        indent(out, depth + 1);
        let end = r.end() - 1;
        if end >= 536_870_911 {
            let _ = writeln!(out, "extensions {} to max;", r.start());
        } else {
            let _ = writeln!(out, "extensions {} to {end};", r.start());
        }
    }
    extensions(out, &m.extension, depth + 1, proto3);
    reserved(
        out,
        m.reserved_range.iter().map(|r| (r.start(), r.end() - 1)),
        &m.reserved_name,
        depth + 1,
    );
    indent(out, depth);
    out.push_str("}\n");
}

fn reserved(
    out: &mut String,
    ranges: impl Iterator<Item = (i32, i32)>,
    names: &[String],
    depth: usize,
) {
    let ranges: Vec<String> = ranges
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else if b >= 536_870_911 {
                format!("{a} to max")
            } else {
                format!("{a} to {b}")
            }
        })
        .collect();
    if !ranges.is_empty() {
        indent(out, depth);
        let _ = writeln!(out, "reserved {};", ranges.join(", "));
    }
    if !names.is_empty() {
        indent(out, depth);
        let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
        let _ = writeln!(out, "reserved {};", quoted.join(", "));
    }
}

/// A type name as written in a field: fully qualified names keep their leading dot, so that
/// the text resolves the same wherever it is read.
fn type_name(f: &FieldDescriptorProto) -> String {
    match f.r#type() {
        Type::Message | Type::Enum | Type::Group => f.type_name().to_string(),
        t => scalar(t).to_string(),
    }
}

fn scalar(t: Type) -> &'static str {
    match t {
        Type::Double => "double",
        Type::Float => "float",
        Type::Int64 => "int64",
        Type::Uint64 => "uint64",
        Type::Int32 => "int32",
        Type::Fixed64 => "fixed64",
        Type::Fixed32 => "fixed32",
        Type::Bool => "bool",
        Type::String => "string",
        Type::Bytes => "bytes",
        Type::Uint32 => "uint32",
        Type::Enum => "enum",
        Type::Sfixed32 => "sfixed32",
        Type::Sfixed64 => "sfixed64",
        Type::Sint32 => "sint32",
        Type::Sint64 => "sint64",
        Type::Message | Type::Group => "message",
    }
}

/// The map entry message a `map<K, V>` field names, if it does.
fn map_entry<'a>(m: &'a DescriptorProto, f: &FieldDescriptorProto) -> Option<&'a DescriptorProto> {
    if f.label() != Label::Repeated || f.r#type() != Type::Message {
        return None;
    }
    let short = f.type_name().rsplit('.').next()?;
    m.nested_type
        .iter()
        .find(|n| n.name() == short && n.options.as_ref().and_then(|o| o.map_entry) == Some(true))
}

fn field(
    out: &mut String,
    m: &DescriptorProto,
    f: &FieldDescriptorProto,
    depth: usize,
    proto3: bool,
    in_oneof: bool,
) {
    indent(out, depth);
    if let Some(entry) = map_entry(m, f) {
        let k = entry.field.iter().find(|x| x.number() == 1);
        let v = entry.field.iter().find(|x| x.number() == 2);
        if let (Some(k), Some(v)) = (k, v) {
            let _ = write!(
                out,
                "map<{}, {}> {} = {}",
                type_name(k),
                type_name(v),
                f.name(),
                f.number()
            );
            field_options(out, f);
            out.push_str(";\n");
            return;
        }
    }
    let label = match f.label() {
        _ if in_oneof => "",
        Label::Repeated => "repeated ",
        Label::Required => "required ",
        Label::Optional if f.proto3_optional() || !proto3 => "optional ",
        Label::Optional => "",
    };
    let _ = write!(out, "{label}{} {} = {}", type_name(f), f.name(), f.number());
    field_options(out, f);
    out.push_str(";\n");
}

fn field_options(out: &mut String, f: &FieldDescriptorProto) {
    let mut opts = Vec::new();
    if let Some(d) = f.default_value.as_deref() {
        if f.r#type() == Type::String {
            opts.push(format!("default = \"{}\"", escape(d)));
        } else {
            opts.push(format!("default = {d}"));
        }
    }
    if let Some(o) = &f.options {
        if let Some(p) = o.packed {
            opts.push(format!("packed = {p}"));
        }
        if o.deprecated == Some(true) {
            opts.push("deprecated = true".to_string());
        }
    }
    if let Some(j) = f.json_name.as_deref() {
        if j != default_json_name(f.name()) {
            opts.push(format!("json_name = \"{}\"", escape(j)));
        }
    }
    if !opts.is_empty() {
        let _ = write!(out, " [{}]", opts.join(", "));
    }
}

/// protoc's JSON name of a field: lowerCamelCase of its name.
fn default_json_name(name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn enumeration(out: &mut String, e: &EnumDescriptorProto, depth: usize) {
    indent(out, depth);
    let _ = writeln!(out, "enum {} {{", e.name());
    if e.options.as_ref().and_then(|o| o.allow_alias) == Some(true) {
        indent(out, depth + 1);
        out.push_str("option allow_alias = true;\n");
    }
    for v in &e.value {
        indent(out, depth + 1);
        let _ = write!(out, "{} = {}", v.name(), v.number());
        if v.options.as_ref().and_then(|o| o.deprecated) == Some(true) {
            out.push_str(" [deprecated = true]");
        }
        out.push_str(";\n");
    }
    reserved(
        out,
        e.reserved_range.iter().map(|r| (r.start(), r.end())),
        &e.reserved_name,
        depth + 1,
    );
    indent(out, depth);
    out.push_str("}\n");
}

fn service(out: &mut String, s: &ServiceDescriptorProto) {
    let _ = writeln!(out, "service {} {{", s.name());
    for m in &s.method {
        let stream = |yes: bool| if yes { "stream " } else { "" };
        let _ = writeln!(
            out,
            "  rpc {}({}{}) returns ({}{});",
            m.name(),
            stream(m.client_streaming()),
            m.input_type(),
            stream(m.server_streaming()),
            m.output_type()
        );
    }
    out.push_str("}\n");
}

fn extensions(out: &mut String, fields: &[FieldDescriptorProto], depth: usize, proto3: bool) {
    let mut extendees: Vec<&str> = fields.iter().map(|f| f.extendee()).collect();
    extendees.dedup();
    for extendee in extendees {
        indent(out, depth);
        let _ = writeln!(out, "extend {extendee} {{");
        for f in fields.iter().filter(|f| f.extendee() == extendee) {
            field(
                out,
                &DescriptorProto::default(),
                f,
                depth + 1,
                proto3,
                false,
            );
        }
        indent(out, depth);
        out.push_str("}\n");
    }
}
