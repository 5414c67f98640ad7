"""The functions a caller's query may call: aggregates, window functions and plain scalar ones.

Nothing that reads outside the query's tables (``query_to_xml``, ``pg_read_file``,
``current_setting``), changes state (``set_config``, ``nextval``) or waits (``pg_sleep``). Names are
lower case; SQLite reports operators ``->``/``->>`` and ``LIKE``/``GLOB`` to its authorizer as
functions too.
"""

from __future__ import annotations

_COMMON = frozenset({
    # aggregates
    "count", "sum", "avg", "min", "max",
    # window functions
    "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead",
    "first_value", "last_value", "nth_value",
    # numbers
    "abs", "round", "ceil", "ceiling", "floor", "sign", "sqrt", "exp", "ln", "log", "power",
    "pow", "mod", "tanh",
    # text
    "lower", "upper", "length", "substr", "substring", "trim", "ltrim", "rtrim", "replace",
    "coalesce", "nullif", "format",
})

POSTGRES_FUNCTIONS = _COMMON | frozenset({
    "stddev", "stddev_pop", "stddev_samp", "variance", "var_pop", "var_samp", "string_agg",
    "array_agg", "json_agg", "jsonb_agg", "bool_and", "bool_or", "every", "percentile_cont",
    "percentile_disc", "mode", "corr", "covar_pop", "covar_samp", "regr_slope",
    "regr_intercept", "trunc", "greatest", "least", "width_bucket", "char_length", "left",
    "right", "btrim", "concat", "concat_ws", "split_part", "position", "strpos", "starts_with",
    "regexp_replace", "regexp_match", "to_char", "date_trunc", "date_part", "extract", "now",
    "age", "to_timestamp", "json_array_length", "jsonb_array_length", "json_extract_path_text",
    "jsonb_extract_path_text", "json_typeof", "jsonb_typeof", "json_array_elements",
    "jsonb_array_elements", "json_array_elements_text", "jsonb_array_elements_text",
    "json_object_keys", "jsonb_object_keys", "json_each", "jsonb_each", "to_json", "to_jsonb",
    "generate_series",
})

SQLITE_FUNCTIONS = _COMMON | frozenset({
    "total", "group_concat", "string_agg", "ifnull", "iif", "instr", "printf", "like", "glob",
    "typeof", "date", "time", "datetime", "julianday", "strftime", "unixepoch", "json",
    "json_extract", "json_array_length", "json_type", "json_valid", "->", "->>",
})
