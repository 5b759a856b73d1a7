// Package pix is saldo's adapter for a Brazilian Pix PSP: charges (cob) and
// refunds (devolucao) through the Banco Central's standard API Pix, and
// sends (pix_transfer, bank_payout) through the PSP's own send API, written
// to the Efí shape (efi.go; a second PSP implements SendAPI, nothing else).
//
// # How the standard maps onto saldo's rules (docs/rules.md)
//
//   - There is no idempotency-key header in Pix. The id saldo chooses and puts
//     in the path IS the key: the txid of PUT /cob/{txid}, the id of
//     PUT /pix/{e2eid}/devolucao/{id}, the idEnvio of PUT /v2/gn/pix/{idEnvio}.
//     saldo's attempt reference (32 lowercase hex, R13) fits all three
//     (txid 26-35 letters and digits, the others 1-35). Capabilities say
//     IdempotencyKeys: false, so the attempts core never re-sends a written
//     request before a lookup has found nothing (R20).
//   - A repeated PUT answers 409 (or, for a devolucao, 400 naming the id as
//     already used, as the BCB description words it): both are "duplicate",
//     resolved by lookup (providers.RefineDuplicate), never a new id, never
//     failed (R6, R14).
//   - Errors are application/problem+json (type, title, status, detail,
//     violacoes). A 400 on our payload fails the attempt naming the violated
//     field; 422 (insufficient funds, payment refused) fails it; 5xx, 408 and
//     cuts after the request was written are unknown (R2).
//   - Authentication is OAuth2 client credentials over mutual TLS. The token
//     request is not a provider call: it never counts as an attempt's
//     exchange, and when no token can be had nothing was sent (the
//     SubmitResult says "not written", so the classifier re-sends later with
//     the same id). A 401 drops the cached token and the request is sent
//     once more with a fresh one (the 401 proves nothing was processed).
//     A second 401, or a 403, is auth_refused: the attempt waits for an
//     operator to fix the credentials instead of failing. The access token
//     and the client secret are redacted from every exchange (body,
//     headers, error), in case a PSP quotes them.
//   - Every report carries an amount and BCB-shaped ids (R17): a final
//     state without a valor, or an endToEndId / rtrId that is not E / D and
//     31 letters or digits, makes a lookup inconclusive and refuses the
//     webhook item (alone: the notice's other items are applied). A CONCLUIDA cob is succeeded only with the Pix that paid
//     it (its endToEndId, which refunds need); without one it is processing.
//   - A cob's status is the status of its record, not of its expiry: an
//     expired unpaid cob stays ATIVA. Lookup reports it failed with
//     failure code cob_expired only once calendario.criacao +
//     calendario.expiracao + ExpiryGrace has passed.
//   - Webhooks: the PSP POSTs {"pix": [...]} to the registered URL with
//     "/pix" appended. The standard protects the callback with mutual TLS;
//     saldo does NOT terminate TLS itself: the reverse proxy in front of
//     saldo verifies the PSP's client certificate. saldo in addition checks
//     the secret carried in the registered URL's query string (?hmac=...),
//     compared in constant time (ParseWebhookRequest). A devolucao
//     DEVOLVIDO of a Pix we sent (its receiver's bank returned it) is
//     reported as the send settled, then failed: a reversal (R9, R19).
//     Every event says its direction (a send's cannot name its
//     operation): a send's matches only operations saldo sent; an item
//     of both shapes (a send's idEnvio, status or tipo beside a txid) is
//     refused alone, never a cob paid (R17).
//
// See docs/providers/pix.md for configuration, certificates and what an
// operator does with a Pix attempt in review.
package pix
