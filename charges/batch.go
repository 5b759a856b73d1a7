package charges

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/internal/pgplan"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/ledger"
)

// Service is an attempts.BatchOwner: the attempts core records the calls of
// charges executed at the same time in one transaction and hands their
// final attempts to AttemptsFinal together (docs/decisions/0002).
var _ attempts.BatchOwner = (*Service)(nil)

// AttemptsFinal is AttemptFinal for the final attempts of calls recorded
// together (attempts.BatchOwner), inside their transaction, with the same
// checks, errors and effects as calling AttemptFinal for each in turn: one
// statement locks the charges (in id order), one reads their splits, every
// credit is added to postings (which the attempts core posts with every
// other owner's ledger transactions in ONE PostMany, so all the accounts
// of the record batch are locked once, in one id order), one statement
// marks the paid charges once their credits are posted and one the failed
// or expired ones, and the final hook runs (OnFinalMany once, else OnFinal
// for each). Any error rolls the caller's transaction back; the attempts
// core then records the batch one attempt at a time.
func (s *Service) AttemptsFinal(ctx context.Context, tx pgx.Tx, as []attempts.Attempt, postings *ledger.Deferred) error {
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.SubjectID
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(as) {
		// Two final attempts of one charge in one record batch cannot
		// happen (a charge has one attempt). Refusing rolls the batch back;
		// its calls are then recorded one by one.
		return fmt.Errorf("charges: AttemptsFinal handed two final attempts of one charge")
	}
	locked, err := s.lockMany(ctx, tx, ids)
	if err != nil {
		return err
	}
	// AttemptFinal's checks, attempt by attempt, so the first refusal is
	// the one calling it for each in turn would give.
	cs := make([]Charge, len(as))
	var paid, failed []int
	for i, a := range as {
		if err := checkKind(a); err != nil {
			return err
		}
		c, ok := locked[a.SubjectID]
		if !ok {
			return fmt.Errorf("charges: attempt %s names charge %s: %w", a.ID, a.SubjectID, ErrNotFound)
		}
		if err := checkFinal(c, a); err != nil {
			return err
		}
		switch a.Status {
		case attempts.StatusSucceeded:
			paid = append(paid, i)
		case attempts.StatusFailed:
			failed = append(failed, i)
		default:
			return fmt.Errorf("charges: AttemptFinal called with status %s", a.Status)
		}
		cs[i] = c
	}
	now := s.clock.Now()
	if err := s.failMany(ctx, tx, cs, as, failed, now); err != nil {
		return err
	}
	if len(paid) == 0 {
		return s.finalHooks(ctx, tx, cs, ids)
	}
	// The hooks see the charges paid: they run once the credits are posted
	// and the charges marked.
	return s.creditMany(ctx, tx, cs, as, paid, now, postings, func() error { return s.finalHooks(ctx, tx, cs, ids) })
}

// lockMany locks the charges named by ids (in id order, one statement) and
// reads their splits (one statement).
func (s *Service) lockMany(ctx context.Context, tx pgx.Tx, ids []string) (map[string]Charge, error) {
	rows, err := tx.Query(ctx, `SELECT `+chargeColumns+` FROM charges
		WHERE id = ANY ($1::text[]) ORDER BY id FOR UPDATE`, pgplan.PerCall, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Charge, len(ids))
	for rows.Next() {
		c, err := scanCharge(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out[c.ID] = c
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT charge_id, recipient_id, percent, fixed, amount FROM charge_splits
		WHERE charge_id = ANY ($1::text[]) ORDER BY charge_id, idx`, pgplan.PerCall, ids)
	if err != nil {
		return nil, err
	}
	var id, r string
	var pct, fixed *decimal.Decimal
	var amt decimal.Decimal
	_, err = pgx.ForEachRow(rows, []any{&id, &r, &pct, &fixed, &amt}, func() error {
		c, ok := out[id]
		if !ok {
			return fmt.Errorf("charges: split of charge %s not asked for", id)
		}
		c.Splits = append(c.Splits, splitOf(r, pct, fixed, amt, c.Amount.Currency()))
		out[id] = c
		return nil
	})
	return out, err
}

// creditMany adds the credits of the paid charges cs[paid...] to postings
// and, once they are posted, marks the charges paid with one conditional
// statement (each must move) and runs then.
func (s *Service) creditMany(ctx context.Context, tx pgx.Tx, cs []Charge, as []attempts.Attempt, paid []int, now time.Time,
	postings *ledger.Deferred, then func() error) error {
	ins := make([]ledger.TransactionInput, len(paid))
	for k, i := range paid {
		in, err := s.creditInput(ctx, tx, cs[i], as[i])
		if err != nil {
			return err
		}
		ins[k] = in
	}
	refused := func(k int, err error) error {
		return fmt.Errorf("charges: credit %s: %w", cs[paid[k]].ID, err)
	}
	postings.Add(ins, refused, func(ts []ledger.Transaction) error {
		if err := s.markPaid(ctx, tx, cs, as, paid, ts, now); err != nil {
			return err
		}
		return then()
	})
	return s.topUpHolds(ctx, tx, cs, as, paid, postings)
}

// topUpHolds adds to postings, after the credits, the top-ups of the open
// short holds that want money of a merchant the credits pay (the charge's
// merchant, each split recipient with a share) in that currency, oldest
// divergence first (holds.TopUp: key divergence_hold:<diverged attempt>:
// <charge attempt>; R9, R21, R22): money a charge brings to available
// fills a short hold before it can be paid out. One statement for the
// batch (from the partial index of open divergences), run before the
// record batch's ledger accounts are locked.
func (s *Service) topUpHolds(ctx context.Context, tx pgx.Tx, cs []Charge, as []attempts.Attempt, paid []int,
	postings *ledger.Deferred) error {
	credits := make([]holds.Credit, 0, len(paid))
	type seen struct{ by, merchant string }
	dup := make(map[seen]bool, len(paid))
	add := func(a attempts.Attempt, merchant string, c Charge, amt decimal.Decimal) {
		k := seen{a.ID.String(), merchant}
		if !amt.IsPositive() || dup[k] {
			return
		}
		dup[k] = true
		credits = append(credits, holds.Credit{Cause: holds.CreditCharge, By: k.by, MerchantID: merchant,
			Currency: c.Amount.Currency()})
	}
	for _, i := range paid {
		c := cs[i]
		add(as[i], c.MerchantID, c, c.MerchantNet.Decimal())
		for _, sp := range c.Splits {
			add(as[i], sp.RecipientID, c, sp.Amount.Decimal())
		}
	}
	if err := holds.TopUp(ctx, tx, s.log, credits, postings); err != nil {
		return fmt.Errorf("charges: holds topped up by %d credits: %w", len(paid), err)
	}
	return nil
}

// markPaid marks the charges cs[paid...] paid by the credit transactions ts
// (in the same order) with one conditional statement.
func (s *Service) markPaid(ctx context.Context, tx pgx.Tx, cs []Charge, as []attempts.Attempt, paid []int, ts []ledger.Transaction, now time.Time) error {
	n := len(paid)
	ids, paidBy, pids := make([]string, n), make([]string, n), make([]*string, n)
	txIDs := make([]int64, n)
	for k, i := range paid {
		ids[k], paidBy[k], pids[k], txIDs[k] = cs[i].ID, as[i].ResolvedBy, sqlcols.Nullable(as[i].ProviderID), ts[k].ID
	}
	tag, err := tx.Exec(ctx, `UPDATE charges c SET status = 'paid', paid_at = $5, paid_by = u.paid_by,
			credit_tx_id = u.tx_id, provider_id = COALESCE(c.provider_id, u.provider_id), updated_at = $5
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS u(cid, paid_by, tx_id, provider_id)
		WHERE c.id = ANY ($1::text[]) AND c.id = u.cid AND c.status IN ('processing', 'awaiting_payment')`,
		pgplan.PerCall, ids, paidBy, txIDs, pids, now)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != int64(n) {
		return fmt.Errorf("charges: %d of %d paid charges changed under their row locks", int64(n)-tag.RowsAffected(), n)
	}
	for k, i := range paid {
		s.logPaid(ctx, cs[i], as[i], ts[k].ID)
	}
	return nil
}

// failMany marks the charges cs[failed...] failed or expired with one
// conditional statement.
func (s *Service) failMany(ctx context.Context, tx pgx.Tx, cs []Charge, as []attempts.Attempt, failed []int, now time.Time) error {
	if len(failed) == 0 {
		return nil
	}
	n := len(failed)
	ids, statuses, codes := make([]string, n), make([]string, n), make([]string, n)
	reasons, pids := make([]*string, n), make([]*string, n)
	fs := make([]failure, n)
	for k, i := range failed {
		fs[k] = failureOf(cs[i], as[i])
		ids[k], statuses[k], codes[k] = cs[i].ID, string(fs[k].status), fs[k].code
		reasons[k], pids[k] = sqlcols.Nullable(fs[k].reason), sqlcols.Nullable(as[i].ProviderID)
	}
	if _, err := tx.Exec(ctx, `UPDATE charges c SET status = u.status, failure_code = u.code,
			failure_reason = u.reason, provider_id = COALESCE(c.provider_id, u.provider_id), updated_at = $6
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(cid, status, code, reason, provider_id)
		WHERE c.id = ANY ($1::text[]) AND c.id = u.cid AND c.status IN ('processing', 'awaiting_payment')`,
		pgplan.PerCall, ids, statuses, codes, reasons, pids, now); err != nil {
		return err
	}
	for k, i := range failed {
		s.logFailed(ctx, cs[i], as[i], fs[k])
	}
	return nil
}

// finalHooks calls the final hook with the charges as they now stand (ids
// in the order of their attempts; cs are the locked charges, whose splits
// did not change).
func (s *Service) finalHooks(ctx context.Context, tx pgx.Tx, cs []Charge, ids []string) error {
	if s.onFinal == nil && s.onFinals == nil {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT `+chargeColumns+` FROM charges WHERE id = ANY ($1::text[])`, pgplan.PerCall, ids)
	if err != nil {
		return err
	}
	now := make(map[string]Charge, len(ids))
	for rows.Next() {
		c, err := scanCharge(rows)
		if err != nil {
			rows.Close()
			return err
		}
		now[c.ID] = c
	}
	if err := rows.Err(); err != nil {
		return err
	}
	final := make([]Charge, len(ids))
	for i, id := range ids {
		c, ok := now[id]
		if !ok {
			return fmt.Errorf("charges: charge %s: %w", id, ErrNotFound)
		}
		c.Splits = cs[i].Splits
		final[i] = c
	}
	if s.onFinals != nil {
		return s.onFinals(ctx, tx, final)
	}
	for _, c := range final {
		if err := s.onFinal(ctx, tx, c); err != nil {
			return err
		}
	}
	return nil
}
