// Package attempts is saldo's core for talking to payment providers without
// ever paying (or charging) twice (docs/rules.md R1-R20).
//
// An attempt is one conversation with a provider to realise one subject: a
// payout, a Pix transfer, a refund, a split leg or a charge. The owning
// domain opens it inside its own transaction (Open), together with its own
// effects (the ledger reserve) and the SubmitAttempt job (River InsertTx).
// From then on the attempt owns the idempotency key, our external
// reference, the exact payload bytes, its status and every HTTP exchange.
//
// # Status
//
//	pending --> succeeded | failed | unknown
//	unknown --> succeeded | failed
//
// succeeded and failed are final. The table is enforced twice: CanTransition
// in Go and the attempts_guard trigger in PostgreSQL. Every transition is a
// conditional UPDATE whose row count is checked (R10), writes an event, and
// for a final status calls the kind's Owner inside the same transaction, so
// the owner (payouts, charges) settles or releases money atomically and
// exactly once. A pending attempt the provider reports as "processing"
// stays pending (ProviderState "processing") until a lookup or webhook
// decides; callers show it as processing (R24).
//
// # Sending
//
// Execute (the SubmitAttempt worker) makes at most one provider call: it
// first increments the call count in its own short transaction, then calls
// with no transaction open, then records the classified result (Classify)
// in one short transaction (R11, R12). Only "not sent" and "rate limited"
// are re-sent, with the same key and bytes, after an explicit backoff; never
// after the provider's key lifetime (R14); for providers without keys only
// after a lookup finds nothing once the consistency window has passed (R20).
// A call that started and recorded nothing (a crash) makes the attempt
// unknown, never a blind re-send.
//
// # Resolving
//
// Unknown and processing attempts are resolved by lookup (Resolve, the
// ResolveAttempt worker, one per attempt) on the schedule 30s, 1m, 2m, 5m,
// 10m, 30m, then every 30m; "not found" fails the attempt only after the
// provider's consistency window (R16), and never once the provider
// acknowledged the operation (a 2xx, its id, a 409 "key in use": kept on
// the attempt whatever status the answer led to); exhaustion, endless
// "processing" or a provider that cannot look up sends it to the review
// queue with an alert, never to automatic failure (R18, R25). Webhooks,
// reconciliation and operators go through ResolveByReference and
// ResolveManually, the same conditional transition. A provider's report
// moves an attempt only when its provider, operation, amount and currency
// (AmountOwner) match; an operator's "failed" is refused while the provider
// may still be paying (ErrManualFailRefused); a success after "failed" is a
// divergence: review, alert, and Verify reports it. The periodic sweeper (Sweep) turns stale in-flight
// calls into unknown and gives every open attempt the job it needs; Verify
// checks the invariants for `saldo audit verify`.
package attempts
