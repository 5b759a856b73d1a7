// Package sim is a simulated payment service provider (PSP) over real HTTP:
// honest about money, hostile about networks. saldo's tests, its demo mode
// (`saldo dev`), its benchmarks and `saldo sim-provider` run against it.
//
// # Two halves
//
// Server is the PSP. It keeps its own record of every operation it executed
// (id, reference, operation, amount, currency, state, idempotency key, time),
// a platform balance per currency that outgoing money draws on, the card
// charges and Pix cobs it holds (so refunds are bounded by what was charged),
// and the idempotency keys it has seen. NewServer builds one; Start serves it
// on a loopback port (httptest style) or Handler mounts it anywhere.
//
// Provider (NewProvider) is the client adapter: a providers.Provider that
// encodes operations into the sim's JSON, makes exactly one HTTP exchange per
// Submit or Lookup through providers.Client, and reads the answers into the
// neutral result types the attempts classifier understands.
//
// # Wire API (what a real PSP would expose)
//
//	POST /v1/operations                 create an operation (Idempotency-Key header)
//	GET  /v1/operations?reference=R     lookup by our reference (eventually consistent)
//	GET  /v1/statements?date=YYYY-MM-DD the day's final operations (reconciliation)
//	GET  /v1/capabilities               what this server is configured to do
//
// # Test and admin endpoints (NOT part of a PSP; for tests, demos and audits)
//
//	GET  /sim/oracle/{reference}        every operation executed for a reference,
//	                                    no lag, with idempotency keys
//	GET  /sim/duplicates                references with more than one money-moving operation
//	GET  /sim/operations                every operation executed, with money_moving
//	GET  /sim/balances                  platform balance per currency
//	POST /sim/cobs/{txid}/pay           play a payer paying a Pix cob (fires a webhook)
//	POST /sim/faults                    add fault rules (one object or an array)
//	PUT  /sim/random-faults             replace the random fault profile ("kind=rate,...")
//	POST /sim/statement-lies            make later statements lie (hide, duplicate,
//	                                    amount, add; Server.AddStatementLie)
//
// # Idempotency (Stripe's rules)
//
// With idempotency enabled (the default) the first response for a key is
// stored and replayed, 500s included, with the header Idempotent-Replayed:
// true. A key reused with a different body gets 400 idempotency_error; a key
// whose first request is still running gets 409 idempotency_key_in_use. Keys
// expire KeyLifetime after their first use; a re-send after that creates a
// NEW operation. Requests refused before execution (malformed input, 429, 503,
// connection resets) store nothing. With Config.NoIdempotency the header is
// ignored and every send creates a new operation, except that a Pix cob's
// txid is unique (a second cob with the same txid is 409 duplicate, as in the
// BCB API).
//
// # Money rules and magic values
//
//   - pix_transfer and bank_payout (BRL only) draw on the platform balance;
//     not enough funds is a 422 decline (code insufficient_funds) recorded as
//     a failed operation.
//   - Pix key value DeclinedPixKey ("nokey@sim.invalid") is 422
//     pix_key_not_found; bank account number ClosedAccount ("99999999") is
//     422 account_closed.
//   - card_charge: card tokens look like "tok_..."; TokenDecline
//     ("tok_decline") is 402 card_declined, TokenInsufficient
//     ("tok_insufficient") is 402 insufficient_funds, TokenExpired
//     ("tok_expired") is 402 expired_card. Every other tok_ token succeeds and
//     credits the platform balance. Raw card numbers are refused (400).
//   - refund: only of a succeeded card charge or a paid cob this server
//     holds, in its currency, never more than what is left unrefunded (400
//     amount_too_large); it draws on the platform balance.
//   - pix_charge: a cob whose txid is our reference (26-35 letters/digits),
//     with an expiry and a BR Code copy-and-paste payload. Lookups report it
//     processing while active, succeeded once paid, failed once expired. Only
//     POST /sim/cobs/{txid}/pay (or Server.PayCob) pays it.
//
// # Faults
//
// Faults come from a script (Config.Faults, `--faults FILE`, Server.AddFault)
// matching on reference, operation and the nth matching call, or at random
// from Config.Random with the seed: reset_before, hang_after, error_after,
// unavailable, rate_limit, slow and lookup_fail. See FaultKind.
//
// # Determinism
//
// Operation ids, event ids, random faults and webhook duplication and
// reordering come from PCG generators seeded with Config.Seed: the same
// sequence of requests gives the same ids and the same faults.
package sim
