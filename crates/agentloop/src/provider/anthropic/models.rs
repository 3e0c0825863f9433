//! What a Claude model takes, from its name.

/// Whether `model` is a Claude that takes structured output (`output_config.format` on the
/// Messages API, `outputConfig.textFormat` on Bedrock Converse): Claude 4.5 and later, as
/// platform.claude.com/docs/en/build-with-claude/structured-outputs and Bedrock's
/// "Get validated JSON results from models" list them (Haiku, Sonnet and Opus 4.5, Opus and
/// Sonnet 4.6, ...). The name may carry a Bedrock region and vendor prefix
/// (`us.anthropic.claude-sonnet-4-5-20250929-v1:0`) or an ARN; a name that is not a Claude's,
/// or one in the older `claude-3-5-sonnet` order, does not.
pub(crate) fn takes_structured_output(model: &str) -> bool {
    generation(model).is_some_and(|version| version >= (4, 5))
}

/// A Claude's (major, minor) version from names in today's order: `claude-<family>-<major>`,
/// then a minor of one or two digits unless a date (eight digits) comes first.
fn generation(model: &str) -> Option<(u32, u32)> {
    let start = model.find("claude-")? + "claude-".len();
    let mut parts = model[start..].split('-');
    let family = parts.next()?;
    if family.is_empty() || !family.bytes().all(|b| b.is_ascii_lowercase()) {
        return None;
    }
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()
        .filter(|part| (1..=2).contains(&part.len()))
        .and_then(|part| part.parse().ok())
        .unwrap_or(0);
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_4_5_and_later_take_structured_output() {
        for (model, takes) in [
            ("claude-sonnet-4-5", true),
            ("claude-sonnet-4-5-20250929", true),
            ("claude-haiku-4-5-20251001", true),
            ("claude-opus-4-5", true),
            ("claude-opus-4-6", true),
            ("claude-sonnet-4-6", true),
            ("claude-opus-4-7", true),
            ("claude-opus-5", true),
            ("claude-sonnet-4-20250514", false),
            ("claude-opus-4-1-20250805", false),
            ("claude-opus-4-0", false),
            ("claude-3-7-sonnet-latest", false),
            ("claude-3-5-haiku-20241022", false),
            ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", true),
            ("global.anthropic.claude-haiku-4-5-20251001-v1:0", true),
            ("anthropic.claude-3-5-sonnet-20240620-v1:0", false),
            (
                "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-opus-4-5-20251101-v1:0",
                true,
            ),
            ("amazon.nova-pro-v1:0", false),
            ("m", false),
            ("claude-", false),
            ("claude-sonnet", false),
        ] {
            assert_eq!(takes_structured_output(model), takes, "{model}");
        }
    }
}
