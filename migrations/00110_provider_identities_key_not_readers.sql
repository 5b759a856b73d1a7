-- +goose Up
-- R16: provider_identities.fingerprint_key (00105) is the key of the HMAC
-- of a provider secret hashed into the row's fingerprint; a role holding
-- both could test guessed weak secrets offline. `saldo migrate
-- --read-only-role` now grants SELECT on the table's other columns only
-- (migrations.GrantReadOnlyRole); this takes the whole-table SELECT it
-- gave before from every grantee that only reads the table (SELECT but
-- neither INSERT nor UPDATE: a read-only role, PUBLIC), leaving it the
-- other columns. The owner and the application role keep theirs.
-- Re-runnable.
-- +goose StatementBegin
DO $$
DECLARE
    t    regclass := to_regclass(quote_ident(current_schema()) || '.provider_identities');
    cols text;
    g    oid;
BEGIN
    IF t IS NULL THEN
        RETURN;
    END IF;
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute WHERE attrelid = t AND attnum > 0 AND NOT attisdropped AND attname <> 'fingerprint_key';
    FOR g IN SELECT a.grantee FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid = t AND a.grantee <> c.relowner
             GROUP BY a.grantee
             HAVING bool_or(a.privilege_type = 'SELECT')
                AND NOT bool_or(a.privilege_type IN ('INSERT', 'UPDATE'))
    LOOP
        EXECUTE format('REVOKE SELECT ON %s FROM %s', t,
                       CASE WHEN g = 0 THEN 'PUBLIC' ELSE g::regrole::text END);
        EXECUTE format('GRANT SELECT (%s) ON %s TO %s', cols, t,
                       CASE WHEN g = 0 THEN 'PUBLIC' ELSE g::regrole::text END);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
SELECT 1;
