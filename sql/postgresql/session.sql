-- Settings a session asks for on each connection it opens (PostgreSQL only).

-- name: session_generic_plans
-- Plan each prepared statement once, without its parameter values, and reuse that plan. For the
-- claim statements, whose plan is the same whatever the values (one bucket's span of the primary
-- key, in key order, then a TID scan), this saves the planning PostgreSQL otherwise repeats on
-- every execution (~240 µs per claim, measured), because a plan made for a known LIMIT looks
-- cheaper to it than one made for an unknown LIMIT.
SET plan_cache_mode = force_generic_plan
