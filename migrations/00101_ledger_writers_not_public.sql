-- +goose Up
-- The ledger's write functions run as the tables' owner (00100), and a new
-- function is executable by PUBLIC: any role that could connect, a
-- read-only reporting or auditing role included, could have moved money
-- between accounts through ledger_post (checked, balanced, but not its to
-- move) or held accounts' row locks through ledger_lock_accounts. Only the
-- roles granted EXECUTE may call them: the owner, and the application role
-- `saldo migrate --app-role` grants (migrations.GrantApplicationRole).
-- Re-runnable.
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname IN ('ledger_post', 'ledger_post_batch', 'ledger_lock_accounts')
               AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
-- +goose StatementEnd
