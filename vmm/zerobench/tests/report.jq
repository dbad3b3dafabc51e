# jq -e filter: a `bench zero` JSON report has exactly the documented schema,
# sane numbers, and the always-present methods at threads 1 and 2.
. as $r
| (keys == ["auto_backend", "results", "size_bytes"])
and (.size_bytes | type) == "number" and .size_bytes > 0
and (.auto_backend | type) == "string"
and ([.results[]
      | select((keys == ["gib_per_s", "method", "ms_per_gib", "threads"])
               and .gib_per_s > 0 and .ms_per_gib > 0
               and ((.gib_per_s * .ms_per_gib - 1000) | fabs) < 0.001)]
     | length) == (.results | length)
and ([.results[] | .method] | contains(["memset", "auto", "kernel_populate_4k", "kernel_populate_thp", $r.auto_backend]))
and ([.results[] | select(.method == "auto") | .threads] == [1, 2])
