# jq -e filter: a `bench zero` JSON report has exactly the documented schema,
# sane numbers, and the always-present methods at threads 1 and 2.
. as $r
| (keys == ["auto_backend", "auto_paired", "auto_picks", "results", "size_bytes"])
and (.size_bytes | type) == "number" and .size_bytes > 0
and (.auto_backend | type) == "string"
and ([.results[]
      | select((keys == ["gib_per_s", "method", "ms_per_gib", "threads"])
               and .gib_per_s > 0 and .ms_per_gib > 0
               and ((.gib_per_s * .ms_per_gib - 1000) | fabs) < 0.001)]
     | length) == (.results | length)
and ([.results[] | .method] | contains(["memset", "auto", "kernel_populate_4k", "kernel_populate_thp", $r.auto_backend]))
and ([.results[] | select(.method == "auto") | .threads] == [1, 2])
# auto's picking rule, restated (not speed): at each thread count the pick
# is in its tie set and within 5 % (prezero::TIE_BAND) of the fastest
# calibrated candidate of its kind (non-temporal or not); pinned picks
# carry no calibration.
and ([.auto_paired[] | .threads] == [1, 2])
and ([.auto_paired[] | select(.pairs >= 15 and .pairs % 2 == 1 and .min > 0 and .min <= .low and .low <= .median and .median <= .high and .high <= .max)] | length) == 2
and ([.auto_picks[] | .threads] == [1, 2])
and ([.auto_picks[]
      | . as $p
      | select(.source == "pinned"
               or ((.tied | index($p.backend)) != null
                   and ([.calibration[] | select(.backend == $p.backend)] | length) == 1
                   and ([.calibration[] | select(.backend == $p.backend) | .gib_per_s][0]
                        >= 0.95 * ([.calibration[]
                                    | select(.non_temporal == ([$p.calibration[] | select(.backend == $p.backend) | .non_temporal][0]))
                                    | .gib_per_s] | max))))]
     | length) == (.auto_picks | length)
