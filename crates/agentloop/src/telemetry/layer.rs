//! The `tracing` layer that turns `agentloop`'s spans into OpenTelemetry SDK spans (feature
//! `otel`).
//!
//! It builds each SDK span when its `tracing` span opens, from the span's fields, and sets the
//! later records on it: no span builder kept per span, no generic conversion of every field and
//! nothing done when a span is exited. The `otel.name`, `otel.kind`, `otel.status_code` and
//! `otel.status_description` fields set the span's name, kind and status, as
//! `tracing-opentelemetry` does with them; every other field is an attribute of its own type
//! (integers stay integers).

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanKind, Status, TraceContextExt as _, Tracer as _,
};
use opentelemetry::{Context, ContextGuard, Key, KeyValue, Value};
use opentelemetry_sdk::trace::SdkTracer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::LookupSpan;

use super::direct::Few;

/// Hands `agentloop`'s spans to an SDK tracer (see the module docs).
pub(super) struct SpanLayer {
    tracer: SdkTracer,
}

impl SpanLayer {
    pub(super) fn new(tracer: SdkTracer) -> Self {
        Self { tracer }
    }
}

/// A span's OpenTelemetry context, holding its SDK span, in the registry's extensions.
struct Traced(Context);

thread_local! {
    /// The contexts attached while their spans are entered, so that code inside (the user's
    /// own OpenTelemetry spans in a tool, say) finds its parent in `Context::current()`.
    static ENTERED: RefCell<Vec<(Id, ContextGuard)>> = const { RefCell::new(Vec::new()) };
}

/// Where a visit puts the attributes it finds.
trait Sink {
    fn push(&mut self, attribute: KeyValue);
}

impl Sink for Vec<KeyValue> {
    fn push(&mut self, attribute: KeyValue) {
        Vec::push(self, attribute);
    }
}

impl Sink for Few {
    fn push(&mut self, attribute: KeyValue) {
        Few::push(self, attribute);
    }
}

/// What a span's fields set: its name, kind and status, and its attributes.
#[derive(Default)]
struct Fields<A> {
    /// The span of a run that builds its OpenTelemetry spans itself: left alone.
    exported: bool,
    name: Option<Cow<'static, str>>,
    kind: Option<SpanKind>,
    status: Option<Status>,
    attributes: A,
}

impl<A: Sink> Fields<A> {
    fn special(&mut self, field: &Field, value: &str) -> bool {
        match field.name() {
            "otel.name" => self.name = Some(text(value)),
            "otel.kind" => self.kind = kind(value),
            "otel.status_code" => self.status = Some(status(value)),
            "otel.status_description" => self.status = Some(Status::error(value.to_owned())),
            _ => return false,
        }
        true
    }

    fn push(&mut self, field: &Field, value: impl Into<Value>) {
        self.attributes
            .push(KeyValue::new(Key::from_static_str(field.name()), value));
    }
}

impl Fields<Few> {
    /// Apply what a record set to a started span.
    fn update(self, span: &opentelemetry::trace::SpanRef<'_>) {
        if let Some(name) = self.name {
            span.update_name(name);
        }
        if let Some(status) = self.status {
            span.set_status(status);
        }
        if !self.attributes.is_empty() {
            span.set_attributes(self.attributes.into_attributes());
        }
    }
}

/// A string value, borrowed when it is a [`known`](super::known) one.
fn text(value: &str) -> Cow<'static, str> {
    match super::known(value) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(value.to_owned()),
    }
}

fn kind(value: &str) -> Option<SpanKind> {
    let kinds = [
        ("internal", SpanKind::Internal),
        ("client", SpanKind::Client),
        ("server", SpanKind::Server),
        ("producer", SpanKind::Producer),
        ("consumer", SpanKind::Consumer),
    ];
    kinds
        .into_iter()
        .find(|(name, _)| value.eq_ignore_ascii_case(name))
        .map(|(_, kind)| kind)
}

fn status(value: &str) -> Status {
    if value.eq_ignore_ascii_case("error") {
        Status::error("")
    } else if value.eq_ignore_ascii_case("ok") {
        Status::Ok
    } else {
        Status::Unset
    }
}

impl<A: Sink> Visit for Fields<A> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "gen_ai.response.finish_reasons" {
            // `tracing` has no arrays: the call's one reason, made the conventions' array.
            self.attributes.push(super::direct::finish_reasons(value));
        } else if !self.special(field, value) {
            self.push(field, text(value));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        // The span's name (`otel.name = %SpanName(..)`) is formatted once and kept as it is.
        if field.name() == "otel.name" {
            self.name = Some(text.into());
        } else if !self.special(field, &text) {
            self.push(field, text);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match i64::try_from(value) {
            Ok(value) => self.push(field, value),
            Err(_) => self.push(field, value.to_string()),
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "agentloop.exported" {
            self.exported = value;
        } else {
            self.push(field, value);
        }
    }
}

/// An event's fields: its message is the OpenTelemetry event's name.
struct EventFields {
    name: Option<String>,
    attributes: Vec<KeyValue>,
}

impl Visit for EventFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.name = Some(value.to_owned()),
            name if name.starts_with("log.") => {}
            name => self
                .attributes
                .push(KeyValue::new(Key::from_static_str(name), value.to_owned())),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => self.name = Some(format!("{value:?}")),
            name if name.starts_with("log.") => {}
            name => self.attributes.push(KeyValue::new(
                Key::from_static_str(name),
                format!("{value:?}"),
            )),
        }
    }
}

impl<S> tracing_subscriber::Layer<S> for SpanLayer
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        // The parent is the span's parent when this layer sees it, else (a contextual span)
        // the OpenTelemetry context current on this thread.
        let parent = span
            .parent()
            .and_then(|parent| parent.extensions().get::<Traced>().map(|t| t.0.clone()));
        let parent = match parent {
            Some(parent) => parent,
            None if attrs.is_contextual() => Context::current(),
            None => Context::new(),
        };
        // Room for the attributes a span ends with, usually: its fields less the `otel.*` ones
        // and the contents recorded only when opted in. Kept small enough for the allocator's
        // per-thread cache; a span with more grows it once.
        let mut fields = Fields {
            attributes: Vec::with_capacity(attrs.fields().len().min(16)),
            ..Fields::default()
        };
        attrs.record(&mut fields);
        if fields.exported {
            return;
        }
        let mut builder = SpanBuilder::from_name(
            fields
                .name
                .unwrap_or(Cow::Borrowed(attrs.metadata().name())),
        );
        builder.span_kind = fields.kind;
        builder.attributes = Some(fields.attributes);
        let mut started = self.tracer.build_with_context(builder, &parent);
        if let Some(status) = fields.status {
            started.set_status(status);
        }
        span.extensions_mut()
            .insert(Traced(parent.with_span(started)));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut fields = Fields::<Few>::default();
        values.record(&mut fields);
        if let Some(traced) = span.extensions().get::<Traced>() {
            fields.update(&traced.0.span());
        }
    }

    fn on_enter(&self, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let Some(cx) = span.extensions().get::<Traced>().map(|t| t.0.clone()) else {
            return;
        };
        let guard = cx.attach();
        ENTERED.with(|entered| entered.borrow_mut().push((id.clone(), guard)));
    }

    fn on_exit(&self, id: &Id, _: LayerContext<'_, S>) {
        let guard = ENTERED.with(|entered| {
            let mut entered = entered.borrow_mut();
            let at = entered.iter().rposition(|(entered, _)| entered == id)?;
            Some(entered.remove(at))
        });
        // Dropped outside the borrow: a guard's drop may run code that enters spans.
        drop(guard);
    }

    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let metadata = event.metadata();
        let mut fields = EventFields {
            name: None,
            attributes: vec![
                KeyValue::new("level", metadata.level().as_str()),
                KeyValue::new("target", metadata.target()),
            ],
        };
        event.record(&mut fields);
        let name = fields
            .name
            .map_or(Cow::Borrowed(metadata.name()), Cow::Owned);
        if let Some(traced) = span.extensions().get::<Traced>() {
            let otel = traced.0.span();
            if *metadata.level() == tracing::Level::ERROR {
                otel.set_status(Status::error(""));
            }
            otel.add_event(name, fields.attributes);
        }
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let traced = span.extensions_mut().remove::<Traced>();
        if let Some(traced) = traced {
            traced.0.span().end();
        }
    }
}
