//! The `#[tool]` attribute for [agentloop](https://docs.rs/agentloop): an `async fn` with a doc
//! comment becomes a typed tool.
//!
//! Use it through agentloop (`use agentloop::tool;`, feature `macros`, on by default); the code
//! it generates names `::agentloop`. The documentation is on [`macro@tool`].

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{
    Attribute, Expr, ExprLit, FnArg, Ident, ItemFn, Lit, LitStr, Pat, Path, ReturnType, Type,
    parse_macro_input,
};

/// Turns an `async fn` into a [`Tool`]: the function stays as it is, and a sibling
/// `fn <name>_tool() -> Tool` (same visibility) builds the tool with [`Tool::function`].
///
/// ```
/// use agentloop::{Agent, tool};
/// use agentloop_testkit::{ScriptedModel, Turn};
///
/// /// Current weather for a city.
/// #[tool]
/// async fn get_weather(
///     /// City name, e.g. "Paris".
///     city: String,
///     /// Days ahead; today when left out.
///     days: Option<u8>,
/// ) -> Result<String, std::io::Error> {
///     Ok(format!("18 °C in {city}, {} days ahead", days.unwrap_or(0)))
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let model = ScriptedModel::new([
///     Turn::tool_call("get_weather", serde_json::json!({"city": "Paris"})),
///     Turn::text("It is 18 °C in Paris."),
/// ]);
/// let agent = Agent::builder(model).tool(get_weather_tool()).build();
/// let result = agent.run("Weather in Paris?").await?;
/// assert_eq!(result.text(), "It is 18 °C in Paris.");
///
/// // The function is still an ordinary function.
/// assert_eq!(get_weather("Rome".into(), Some(1)).await.unwrap(), "18 °C in Rome, 1 days ahead");
/// # Ok::<(), agentloop::Error>(()) }).unwrap();
/// ```
///
/// - **Name**: the function's name (`get_weather`); `#[tool(name = "weather")]` sets another.
/// - **Description**: the whole doc comment, which is required: the model reads it to decide
///   when to call the tool, so write it for the model. Lines are joined with newlines, as
///   schemars reads a struct's doc comment.
/// - **Parameters**: each `name: Type` is a property of the arguments object. A doc comment
///   on a parameter is that property's `description`; `#[serde(...)]` and `#[schemars(...)]`
///   attributes on a parameter apply to it as they would to a struct field (e.g.
///   `#[schemars(range(min = 1, max = 16))]`). `Option<T>` parameters are not required. A
///   type can be anything that implements `Deserialize` and `JsonSchema`, including your own
///   structs and enums, whose schemas are inlined. Parameters are owned: the arguments are
///   deserialized from the model's JSON.
/// - **Context**: a first parameter of type [`ToolContext`] receives the call's context (call
///   id, cancellation, the agent's shared state); it is not part of the schema.
/// - **Return**: `Result<T, E>` (any type whose last path segment is `Result`, such as
///   `anyhow::Result<T>`) with `T: Serialize` and `E: Display`: `Ok` is the tool's result and
///   `Err` an error result the model sees, as with [`Tool::function`]. Any other type is a
///   `T: Serialize` result that cannot fail. Strings become text, other values JSON text.
///
/// The function must be a free function (not a method), not generic, and not `unsafe`; each
/// misuse is a compile error that says what to write instead. `#[tool(crate = "path")]` names
/// agentloop when it is re-exported under another path.
///
/// [`Tool`]: https://docs.rs/agentloop/latest/agentloop/tool/struct.Tool.html
/// [`Tool::function`]: https://docs.rs/agentloop/latest/agentloop/tool/struct.Tool.html#method.function
/// [`ToolContext`]: https://docs.rs/agentloop/latest/agentloop/tool/struct.ToolContext.html
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut options = Options::default();
    let parser = syn::meta::parser(|meta| options.parse(meta));
    parse_macro_input!(attr with parser);
    let function = parse_macro_input!(item as ItemFn);
    expand(options, function)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// What `#[tool(...)]` may say.
#[derive(Default)]
struct Options {
    name: Option<LitStr>,
    krate: Option<Path>,
}

impl Options {
    fn parse(&mut self, meta: syn::meta::ParseNestedMeta<'_>) -> syn::Result<()> {
        if meta.path.is_ident("name") {
            self.name = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("crate") {
            let path: LitStr = meta.value()?.parse()?;
            self.krate = Some(path.parse()?);
        } else {
            return Err(meta.error(
                "unknown `#[tool]` option: write `#[tool]`, `#[tool(name = \"...\")]` or \
                 `#[tool(crate = \"path::to::agentloop\")]`",
            ));
        }
        Ok(())
    }
}

/// One model-supplied parameter: it becomes a field of the hidden arguments struct.
struct Param {
    ident: Ident,
    ty: Type,
    /// Doc comments and serde/schemars attributes, moved from the parameter to the field.
    attrs: Vec<Attribute>,
}

fn expand(options: Options, mut function: ItemFn) -> syn::Result<TokenStream2> {
    check_signature(&function)?;
    let description = description(&function)?;
    let krate = options
        .krate
        .unwrap_or_else(|| syn::parse_quote!(::agentloop));

    let mut with_context = false;
    let mut params = Vec::new();
    let mut errors: Option<syn::Error> = None;
    let mut push_error = |error: syn::Error| match &mut errors {
        Some(errors) => errors.combine(error),
        None => errors = Some(error),
    };
    for (index, input) in function.sig.inputs.iter_mut().enumerate() {
        let FnArg::Typed(input) = input else {
            // `check_signature` refused receivers.
            continue;
        };
        if is_tool_context(&input.ty) {
            if index == 0 {
                with_context = true;
            } else {
                push_error(syn::Error::new_spanned(
                    &input.ty,
                    "`ToolContext` must be the first parameter of a `#[tool]` function",
                ));
            }
            continue;
        }
        match param(input) {
            Ok(param) => params.push(param),
            Err(error) => push_error(error),
        }
    }
    if let Some(errors) = errors {
        return Err(errors);
    }

    let vis = &function.vis;
    let name = &function.sig.ident;
    let tool_name = match options.name {
        Some(name) => name,
        None => LitStr::new(&name.unraw().to_string(), name.span()),
    };
    let tool_fn = format_ident!("{}_tool", name.unraw());
    let tool_fn_doc = format!(
        "The tool for `{}`, made by `#[tool]`: add it to an agent with `.tool({tool_fn}())`.",
        name.unraw()
    );
    let serde_crate = format!("{}::__private::serde", quote!(#krate));
    let schemars_crate = format!("{}::__private::schemars", quote!(#krate));

    let fields = params.iter().map(|p| {
        let Param { ident, ty, attrs } = p;
        quote!(#(#attrs)* #ident: #ty)
    });
    let args = format_ident!("__agentloop_args");
    let passed = params.iter().map(|p| {
        let ident = &p.ident;
        quote!(#args.#ident)
    });
    let context = format_ident!("__agentloop_context");
    let call = if with_context {
        quote!(#name(#context, #(#passed),*).await)
    } else {
        quote!(#name(#(#passed),*).await)
    };
    let output = if returns_result(&function.sig.output) {
        call
    } else {
        quote!(::core::result::Result::<_, ::core::convert::Infallible>::Ok(#call))
    };
    let constructor = if with_context {
        quote! {
            #krate::Tool::function_with_context(
                #tool_name,
                #description,
                |#context: #krate::ToolContext, #args: __AgentloopToolArgs| async move { #output },
            )
        }
    } else {
        quote! {
            #krate::Tool::function(
                #tool_name,
                #description,
                |#args: __AgentloopToolArgs| async move { #output },
            )
        }
    };
    let span = function.sig.ident.span();
    let tool_fn = quote_spanned! {span=>
        #[doc = #tool_fn_doc]
        #vis fn #tool_fn() -> #krate::Tool {
            #[derive(#krate::__private::serde::Deserialize, #krate::__private::schemars::JsonSchema)]
            #[serde(crate = #serde_crate)]
            #[schemars(crate = #schemars_crate)]
            struct __AgentloopToolArgs {
                #(#fields,)*
            }
            #constructor
        }
    };
    Ok(quote! {
        #function
        #tool_fn
    })
}

/// Refuse what cannot become a tool, with a message saying what to write instead.
fn check_signature(function: &ItemFn) -> syn::Result<()> {
    let sig = &function.sig;
    if let Some(receiver) = sig.receiver() {
        return Err(syn::Error::new_spanned(
            receiver,
            "`#[tool]` works on free functions, not methods: the model cannot supply `self`; \
             reach shared state through a first parameter `ctx: ToolContext` and \
             `ctx.state::<S>()` instead",
        ));
    }
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "`#[tool]` needs an `async fn`: tools run on the async runtime (write `async fn`; \
             run blocking work inside with `tokio::task::spawn_blocking`)",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "a `#[tool]` function cannot be generic: its parameters become one concrete type \
             that the model's arguments are deserialized into",
        ));
    }
    if let Some(unsafety) = sig.unsafety {
        return Err(syn::Error::new_spanned(
            unsafety,
            "a `#[tool]` function cannot be `unsafe`: the model calls it with arguments it chose",
        ));
    }
    if let Some(abi) = &sig.abi {
        return Err(syn::Error::new_spanned(
            abi,
            "a `#[tool]` function cannot have an `extern` ABI",
        ));
    }
    if let Some(variadic) = &sig.variadic {
        return Err(syn::Error::new_spanned(
            variadic,
            "a `#[tool]` function cannot be variadic",
        ));
    }
    Ok(())
}

/// The doc comment as one `&str` expression: the lines joined with `\n`, one leading space of
/// each literal line dropped (as rustdoc and schemars do), trimmed when the tool is built.
/// `#[doc = include_str!(..)]` and other non-literal docs are kept as they are.
fn description(function: &ItemFn) -> syn::Result<TokenStream2> {
    let mut pieces = Vec::new();
    let mut blank = true;
    for attr in function.attrs.iter().filter(|a| a.path().is_ident("doc")) {
        let value = &attr.meta.require_name_value()?.value;
        if let Expr::Lit(ExprLit {
            lit: Lit::Str(line),
            ..
        }) = value
        {
            let line = line.value();
            blank &= line.trim().is_empty();
            let line = line.strip_prefix(' ').unwrap_or(&line).to_owned();
            pieces.push(quote!(#line));
        } else {
            blank = false;
            pieces.push(quote!(#value));
        }
    }
    if blank {
        return Err(syn::Error::new_spanned(
            &function.sig.ident,
            "a `#[tool]` function needs a doc comment: it is the tool's description, which the \
             model reads to decide when to call it (write `/// What it does.` above the function)",
        ));
    }
    let lines = pieces.iter().enumerate().map(|(i, piece)| match i {
        0 => quote!(#piece),
        _ => quote!("\n", #piece),
    });
    Ok(quote!(::core::concat!(#(#lines),*).trim()))
}

/// A model-supplied parameter, its doc/serde/schemars attributes moved off the function.
fn param(input: &mut syn::PatType) -> syn::Result<Param> {
    let ident = match &*input.pat {
        Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => pat.ident.clone(),
        other => {
            return Err(syn::Error::new_spanned(
                other,
                "a `#[tool]` parameter must be a plain name such as `city: String`: each \
                 parameter is a named property of the arguments object the model sends",
            ));
        }
    };
    match &*input.ty {
        Type::Reference(_) => {
            return Err(syn::Error::new_spanned(
                &input.ty,
                "a `#[tool]` parameter must own its value (`String`, not `&str`): the arguments \
                 are deserialized from the model's JSON",
            ));
        }
        Type::ImplTrait(_) => {
            return Err(syn::Error::new_spanned(
                &input.ty,
                "a `#[tool]` parameter cannot be `impl Trait`: it needs one concrete type that \
                 implements `Deserialize` and `JsonSchema`",
            ));
        }
        _ => {}
    }
    let (moved, kept) = std::mem::take(&mut input.attrs).into_iter().partition(|a| {
        let path = a.path();
        path.is_ident("doc") || path.is_ident("serde") || path.is_ident("schemars")
    });
    input.attrs = kept;
    Ok(Param {
        ident,
        ty: (*input.ty).clone(),
        attrs: moved,
    })
}

/// Whether `ty` names agentloop's `ToolContext` (by its last path segment).
fn is_tool_context(ty: &Type) -> bool {
    last_segment(ty).is_some_and(|segment| segment == "ToolContext")
}

/// Whether the function returns a `Result` (by the return type's last path segment).
fn returns_result(output: &ReturnType) -> bool {
    match output {
        ReturnType::Default => false,
        ReturnType::Type(_, ty) => last_segment(ty).is_some_and(|segment| segment == "Result"),
    }
}

fn last_segment(ty: &Type) -> Option<&Ident> {
    match ty {
        Type::Path(path) if path.qself.is_none() => {
            path.path.segments.last().map(|segment| &segment.ident)
        }
        Type::Group(group) => last_segment(&group.elem),
        Type::Paren(paren) => last_segment(&paren.elem),
        _ => None,
    }
}
