// Package reconcile compares each day of each provider's statement with
// saldo's attempts and ledger (docs/rules.md R19, issue 16): the last
// safety net, after lookups, webhooks and the review queue.
//
// A run (Service.Run; the daily River job; `saldo reconcile`) reads
// Provider.Statement(day) and matches its lines to the provider's attempts
// by our reference, then by the provider's id. What it finds is a
// Divergence, stored once per (provider, kind, fingerprint) whatever the
// number of runs that see it, with both sides (the statement's lines and
// the attempt); the fingerprint of a divergence about money that moved
// names the provider operation, so another operation is another
// divergence:
//
//   - resolved_by_reconciliation (info): the statement names an operation
//     whose attempt is still open (pending or unknown). It is resolved
//     through attempts.ResolveByReference, the same conditional transition
//     webhooks and the resolver use (source reconciliation, the run id as
//     actor, the statement line in the reason), so its owner settles or
//     credits exactly once; the divergence is stored resolved.
//   - paid_but_failed (critical): the provider moved money, our attempt is
//     failed. The attempts core records the divergence on the attempt and
//     puts it in the review queue; nothing moves in the ledger.
//   - unknown_to_us (critical): the provider moved money under a
//     reference or id no attempt of that provider has. Nothing moves in
//     the ledger.
//   - double_payment (critical): two money-moving provider operations for
//     one reference, or for one intent (two attempts of one payout or
//     charge both paid), or a money-moving operation, on any day's
//     statement, under the reference of a succeeded attempt whose
//     recorded provider id is another (or of an open attempt, besides the
//     operation the run resolves it with). The attempts core records such
//     an operation on the attempt (second_operation); on an open attempt
//     a note (attempts.NoteSecondOperation), the divergence once the
//     attempt is made final, whatever became of its own line.
//   - unreadable_line (critical): a statement line saldo cannot read (text
//     PostgreSQL cannot store, or a currency saldo does not know). It is
//     reported alone, its fields quoted, matched to no attempt and counted
//     in no total; the day's other lines are reconciled.
//   - missing_at_provider (high): our attempt succeeded and the provider
//     lists no successful operation for it on the statements of its
//     window: the day saldo recorded it succeeded, and as many days before
//     and after as the provider declares it may date the operation's line
//     (providers.StatementDater: a day either side unless
//     declared; Stripe lists a payout or refund on the day it was created,
//     a Pix PSP a devolucao on the day of the Pix it returns). The window
//     never reaches before the attempt (or the charge a refund returns)
//     was opened, a line confirms only the attempt it names, and one
//     attempt at most. Judged only once the window's last day has closed;
//     until then it is counted as deferred.
//   - amount_mismatch (high): the statement's amount, currency or
//     operation differs from the attempt's (an open attempt then goes to
//     review through ResolveByReference, which moves nothing); or the
//     statement lists one provider operation (provider id) more than once
//     with different amounts, currencies, states or operations
//     (conflicts): every line is named, no open attempt is resolved by
//     them, the totals count each amount.
//   - ledger_totals (high): per currency and direction, the ledger's
//     settled (payout_settle) and credited (charge_credit) sums of the
//     provider's attempts resolved that day differ from the statement's
//     succeeded totals. Resolved by reconciliation when a re-run finds them
//     equal.
//   - stale_open (medium): an attempt of the provider unknown, or open and
//     in review, for longer than Config.StaleAfter (the age report).
//     Resolved by reconciliation once the attempt is final.
//
// Critical divergences raise an ERROR log and Config.OnAlert, and
// `saldo audit verify` reports every open one (Verify). Operators resolve a
// divergence with a reason (Resolve); a resolved divergence stays resolved
// (a trigger refuses any change to it).
package reconcile
