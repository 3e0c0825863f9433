#!/usr/bin/env python3
"""Regenerate crates/agentloop/data/prices.json from the genai-prices dataset.

The source is `prices/new_data/v2/data_slim.json` of https://github.com/pydantic/genai-prices
(MIT License, Copyright (c) Pydantic Services Inc.). The output keeps, for the providers
agentloop routes to, each model's match rule, context window and prices per million tokens
(input, output, cache read, cache write; tiers by input size; dated price changes).
Time-of-day price windows are dropped: the base price is kept.

Usage: scripts/refresh-prices.py [SOURCE [OUT]]
SOURCE is a path or URL (default: the dataset's main branch); OUT defaults to the crate's
data file. Runs offline when SOURCE is a local file.
"""

import json
import os
import sys
import urllib.request

DEFAULT = ("https://raw.githubusercontent.com/pydantic/genai-prices/main/"
           "prices/new_data/v2/data_slim.json")
PROVIDERS = ["openai", "anthropic", "google", "aws", "azure", "mistral", "deepseek", "groq",
             "x-ai", "together", "fireworks", "cerebras", "openrouter", "moonshotai"]
KEYS = {"input_mtok": "input", "output_mtok": "output", "cache_read_mtok": "cache_read",
        "cache_write_mtok": "cache_write"}
OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "agentloop", "data", "prices.json")


def load(source):
    if source.startswith("http"):
        with urllib.request.urlopen(source, timeout=60) as response:
            return json.load(response)
    with open(source, encoding="utf-8") as f:
        return json.load(f)


def price(value):
    """A number, or {base, tiers: [[start, price], ...]}, as decimal strings."""
    if isinstance(value, dict):
        return {"base": str(value["base"]),
                "tiers": [[t["start"], str(t["price"])] for t in value["tiers"]]}
    return str(value)


def prices(raw):
    return {KEYS[k]: price(v) for k, v in raw.items() if k in KEYS}


def model(raw):
    out = {"id": raw["id"], "match": raw["match"]}
    if raw.get("context_window"):
        out["context_window"] = raw["context_window"]
    if isinstance(raw["prices"], dict):
        out["prices"] = prices(raw["prices"])
    else:
        dated = []
        for entry in raw["prices"]:
            constraint = entry.get("constraint") or {}
            if "start_time" in constraint:
                continue  # time-of-day windows: keep the base price
            dated.append({"from": constraint.get("start_date"), "prices": prices(entry["prices"])})
        out["dated"] = dated
    return out


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    data = load(source)
    providers = {p["id"]: [model(m) for m in p["models"]] for p in data if p["id"] in PROVIDERS}
    missing = sorted(set(PROVIDERS) - set(providers))
    if missing:
        sys.exit(f"the dataset has no provider {', '.join(missing)}")
    document = {
        "source": "genai-prices prices/new_data/v2/data_slim.json "
                  "(https://github.com/pydantic/genai-prices, MIT License)",
        "currency": "USD",
        "per": "million tokens",
        "providers": providers,
    }
    out = sys.argv[2] if len(sys.argv) > 2 else OUT
    with open(out, "w", encoding="utf-8") as f:
        json.dump(document, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    count = sum(len(m) for m in providers.values())
    print(f"wrote {count} models of {len(providers)} providers to {os.path.normpath(out)}")


if __name__ == "__main__":
    main()
