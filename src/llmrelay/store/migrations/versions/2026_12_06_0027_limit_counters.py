"""limit counters: rpm, tpm, concurrency and budgets shared by replicas through PostgreSQL
when there is no Redis (limits/postgres.py): the tables, and on PostgreSQL the two stored
functions that admit and settle a batch of requests atomically, each in one round trip.

The functions lock every scope of their batch (transaction-scoped advisory locks, taken in
one order so two replicas' batches never deadlock), then check and take each request's limits
in turn as the Redis script does: a refused request takes nothing.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Input: a JSON array of admissions, each {"n": now (Unix seconds), "t": tokens, "l": lease
# id, "e": lease expiry, "h": budget hold (micro-USD), "m": month "YYYY-MM", "s": scopes},
# each scope [name, rpm, tpm, concurrency, budget] (null: no such limit). Output, per
# admission: [0, scope index (1-based), kind (1 rpm, 2 tpm, 3 concurrency, 4 budget),
# figure, figure] when refused, else [1] followed by six figures per scope: requests in the
# window, its oldest second, tokens in the window, its oldest second, leases in flight (this
# one included), spend plus what in-flight requests hold (micro-USD). The window is the 61
# seconds up to now's (as tpm's local buckets), so rpm never admits more than its limit in
# any 60 s.
_ADMIT = """
CREATE OR REPLACE FUNCTION llmrelay_limits_admit(batch jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $fn$
DECLARE
  r jsonb; sc jsonb; figs jsonb; answer jsonb := '[]'::jsonb; refused jsonb;
  v_now double precision; v_sec bigint; v_oldest bigint; v_tokens bigint; v_lease text;
  v_expiry double precision; v_hold bigint; v_month text;
  v_name text; v_rpm bigint; v_tpm bigint; v_conc bigint; v_budget bigint;
  used_r bigint; low_r bigint; used_t bigint; low_t bigint; v_live bigint; v_held bigint;
  v_spent bigint; v_reserve bigint; i int; lock_key bigint;
BEGIN
  FOR lock_key IN
    SELECT DISTINCT hashtextextended(x->>0, 0) FROM jsonb_array_elements(batch) a,
      jsonb_array_elements(a->'s') x ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(lock_key);
  END LOOP;
  FOR r IN SELECT value FROM jsonb_array_elements(batch) LOOP
    v_now := (r->>'n')::double precision;
    v_sec := floor(v_now)::bigint;
    v_oldest := v_sec - 60;
    v_tokens := (r->>'t')::bigint;
    v_lease := r->>'l';
    v_expiry := (r->>'e')::double precision;
    v_hold := coalesce((r->>'h')::bigint, 0);
    v_month := r->>'m';
    refused := NULL;
    figs := '[]'::jsonb;
    i := 0;
    FOR sc IN SELECT value FROM jsonb_array_elements(r->'s') LOOP
      i := i + 1;
      v_name := sc->>0;
      v_rpm := (sc->>1)::bigint; v_tpm := (sc->>2)::bigint;
      v_conc := (sc->>3)::bigint; v_budget := (sc->>4)::bigint;
      used_r := 0; low_r := NULL; used_t := 0; low_t := NULL;
      v_live := 0; v_held := 0; v_spent := 0;
      IF v_rpm IS NOT NULL OR v_tpm IS NOT NULL THEN
        SELECT coalesce(sum(w.requests), 0), min(w.second) FILTER (WHERE w.requests > 0),
               coalesce(sum(w.tokens), 0), min(w.second) FILTER (WHERE w.tokens <> 0)
          INTO used_r, low_r, used_t, low_t
          FROM limit_windows w WHERE w.scope = v_name AND w.second >= v_oldest;
        IF v_rpm IS NOT NULL AND used_r >= v_rpm THEN
          refused := jsonb_build_array(0, i, 1, used_r, low_r); EXIT;
        END IF;
        IF v_tpm IS NOT NULL AND used_t + least(v_tokens, v_tpm) > v_tpm THEN
          refused := jsonb_build_array(0, i, 2, used_t, low_t); EXIT;
        END IF;
      END IF;
      IF v_conc IS NOT NULL OR v_budget IS NOT NULL THEN
        DELETE FROM limit_leases l WHERE l.scope = v_name AND l.expires_at <= v_now;
        SELECT count(*), coalesce(sum(l.held_micros), 0) INTO v_live, v_held
          FROM limit_leases l WHERE l.scope = v_name;
        IF v_conc IS NOT NULL AND v_live >= v_conc THEN
          refused := jsonb_build_array(0, i, 3, v_conc, ''); EXIT;
        END IF;
      END IF;
      IF v_budget IS NOT NULL THEN
        SELECT coalesce(max(p.spent_micros), 0) INTO v_spent
          FROM limit_spend p WHERE p.scope = v_name AND p.month = v_month;
        IF v_spent + v_held >= v_budget THEN
          refused := jsonb_build_array(0, i, 4, 0, (v_spent + v_held)::text); EXIT;
        END IF;
      END IF;
      figs := figs || jsonb_build_array(
        jsonb_build_array(used_r, low_r, used_t, low_t, v_live, v_spent + v_held));
    END LOOP;
    IF refused IS NOT NULL THEN
      answer := answer || jsonb_build_array(refused);
      CONTINUE;
    END IF;
    refused := '[1]'::jsonb;
    i := 0;
    FOR sc IN SELECT value FROM jsonb_array_elements(r->'s') LOOP
      i := i + 1;
      v_name := sc->>0;
      v_rpm := (sc->>1)::bigint; v_tpm := (sc->>2)::bigint;
      v_conc := (sc->>3)::bigint; v_budget := (sc->>4)::bigint;
      used_r := (figs->(i - 1)->>0)::bigint; low_r := (figs->(i - 1)->>1)::bigint;
      used_t := (figs->(i - 1)->>2)::bigint; low_t := (figs->(i - 1)->>3)::bigint;
      v_live := (figs->(i - 1)->>4)::bigint; v_spent := (figs->(i - 1)->>5)::bigint;
      IF v_rpm IS NOT NULL OR v_tpm IS NOT NULL THEN
        v_reserve := CASE WHEN v_tpm IS NULL THEN 0 ELSE least(v_tokens, v_tpm) END;
        INSERT INTO limit_windows AS w (scope, slot, second, requests, tokens)
          VALUES (v_name, (v_sec % 61)::int, v_sec, 1, v_reserve)
          ON CONFLICT (scope, slot) DO UPDATE SET
            requests = CASE WHEN w.second >= excluded.second
                            THEN w.requests + 1 ELSE 1 END,
            tokens = CASE WHEN w.second >= excluded.second
                          THEN w.tokens + excluded.tokens ELSE excluded.tokens END,
            second = greatest(w.second, excluded.second);
        used_r := used_r + 1; low_r := coalesce(least(low_r, v_sec), v_sec);
        used_t := used_t + v_reserve;
        IF v_reserve <> 0 THEN low_t := coalesce(least(low_t, v_sec), v_sec); END IF;
      END IF;
      IF v_conc IS NOT NULL OR v_budget IS NOT NULL THEN
        INSERT INTO limit_leases (scope, lease, expires_at, held_micros)
          VALUES (v_name, v_lease, v_expiry,
                  CASE WHEN v_budget IS NULL THEN 0 ELSE v_hold END)
          ON CONFLICT (scope, lease) DO NOTHING;
        v_live := v_live + 1;
        IF v_budget IS NOT NULL THEN v_spent := v_spent + v_hold; END IF;
      END IF;
      refused := refused || jsonb_build_array(used_r, low_r, used_t, low_t, v_live, v_spent);
    END LOOP;
    answer := answer || jsonb_build_array(refused);
  END LOOP;
  RETURN answer;
END
$fn$
"""

# Input: a JSON array of settles, each [lease id, the admission's second, its month,
# scopes], each scope [name, tpm delta or null, cost or null]. The lease (and what it held)
# goes, the tpm bucket the admission reserved in is corrected if still in the window, the
# cost is added to the month's spend, under the same locks as admissions (an admission sees
# a hold or its cost, never neither).
_SETTLE = """
CREATE OR REPLACE FUNCTION llmrelay_limits_settle(batch jsonb) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  r jsonb; sc jsonb; v_bucket bigint; v_name text; lock_key bigint;
BEGIN
  FOR lock_key IN
    SELECT DISTINCT hashtextextended(x->>0, 0) FROM jsonb_array_elements(batch) a,
      jsonb_array_elements(a->3) x ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(lock_key);
  END LOOP;
  FOR r IN SELECT value FROM jsonb_array_elements(batch) LOOP
    v_bucket := (r->>1)::bigint;
    FOR sc IN SELECT value FROM jsonb_array_elements(r->3) LOOP
      v_name := sc->>0;
      DELETE FROM limit_leases l WHERE l.scope = v_name AND l.lease = r->>0;
      IF jsonb_typeof(sc->1) = 'number' THEN
        UPDATE limit_windows w SET tokens = w.tokens + (sc->>1)::bigint
          WHERE w.scope = v_name AND w.slot = (v_bucket % 61)::int AND w.second = v_bucket;
      END IF;
      IF jsonb_typeof(sc->2) = 'number' THEN
        INSERT INTO limit_spend AS p (scope, month, spent_micros)
          VALUES (v_name, r->>2, (sc->>2)::bigint)
          ON CONFLICT (scope, month) DO UPDATE
            SET spent_micros = p.spent_micros + excluded.spent_micros;
      END IF;
    END LOOP;
  END LOOP;
END
$fn$
"""


def upgrade() -> None:
    op.create_table(
        "limit_windows",
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("second", sa.BigInteger(), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "slot", name=op.f("pk_limit_windows")),
    )
    op.create_table(
        "limit_leases",
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("lease", sa.String(length=100), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("held_micros", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "lease", name=op.f("pk_limit_leases")),
    )
    op.create_table(
        "limit_spend",
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("spent_micros", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "month", name=op.f("pk_limit_spend")),
    )
    op.create_table(
        "limit_replicas",
        sa.Column("replica", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("replica", name=op.f("pk_limit_replicas")),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_ADMIT)
        op.execute(_SETTLE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS llmrelay_limits_settle(jsonb)")
        op.execute("DROP FUNCTION IF EXISTS llmrelay_limits_admit(jsonb)")
    op.drop_table("limit_replicas")
    op.drop_table("limit_spend")
    op.drop_table("limit_leases")
    op.drop_table("limit_windows")
