-- +goose Up
-- The payouts guard runs only when an UPDATE would break a rule (issue 5,
-- performance): the same conditions as payouts_guard (00030), in the
-- trigger's WHEN clause, evaluated without a PL/pgSQL call per row; the
-- function (unchanged) runs only to raise the error. DELETE keeps its own
-- trigger: payouts are never deleted. fillfactor leaves room for the
-- status update to stay on the page (HOT: no index changes).
DROP TRIGGER payouts_guard ON payouts;
CREATE TRIGGER payouts_guard_delete BEFORE DELETE ON payouts
    FOR EACH ROW EXECUTE FUNCTION payouts_guard();
CREATE TRIGGER payouts_guard BEFORE UPDATE ON payouts
    FOR EACH ROW
    WHEN ((OLD.status = 'succeeded' AND NEW.status <> 'succeeded')
       OR NEW.amount <> OLD.amount OR NEW.currency <> OLD.currency OR NEW.merchant_id <> OLD.merchant_id
       OR NEW.kind <> OLD.kind)
    EXECUTE FUNCTION payouts_guard();
ALTER TABLE payouts SET (fillfactor = 80);

-- +goose Down
ALTER TABLE payouts RESET (fillfactor);
DROP TRIGGER payouts_guard ON payouts;
DROP TRIGGER payouts_guard_delete ON payouts;
CREATE TRIGGER payouts_guard BEFORE UPDATE OR DELETE ON payouts
    FOR EACH ROW EXECUTE FUNCTION payouts_guard();
