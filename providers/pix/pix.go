package pix

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/saldo/saldo/providers"
)

// Provider is the Pix adapter: a providers.Provider.
type Provider struct {
	cfg    Config
	client *providers.Client
	tokens *tokenCache

	// refunds remembers the endToEndId each refund reference returns
	// (learned from the payload in EncodePayload and Submit), so its lookup
	// is one GET. See Lookup for what happens without it.
	mu         sync.Mutex
	refunds    map[string]string
	refundFIFO []string
}

// maxRemembered bounds the refunds remembered (the oldest are forgotten;
// their lookups then search).
const maxRemembered = 100_000

var _ providers.Provider = (*Provider)(nil)

// Name is the provider name stored on attempts.
func (p *Provider) Name() string { return p.cfg.Name }

// Client is the adapter's HTTP client (tests use CloseIdle).
func (p *Provider) Client() *providers.Client { return p.client }

// Capabilities of a Pix PSP: no idempotency keys (the id in the path is the
// key, R20), lookup by reference, webhooks and statements. Charges and
// refunds need the standard API's base URL, sends the send API's.
func (p *Provider) Capabilities() providers.Capabilities {
	c := providers.Capabilities{
		IdempotencyKeys:   false,
		LookupByReference: true,
		ConsistencyWindow: p.cfg.ConsistencyWindow,
		Webhooks:          true,
		Statements:        true,
	}
	if p.cfg.BaseURL != "" {
		c.Operations = append(c.Operations, providers.OpPixCharge, providers.OpRefund)
	}
	if p.cfg.SendBaseURL != "" {
		c.Operations = append(c.Operations, providers.OpPixTransfer, providers.OpBankPayout)
		c.Destinations = map[providers.Operation][]providers.DestinationKind{
			providers.OpPixTransfer: {providers.DestPixKey, providers.DestBankAccount},
			providers.OpBankPayout:  {providers.DestBankAccount},
		}
	}
	return c
}

// envelope is what EncodePayload returns and the attempt stores: the path
// of the PUT (relative to the API's base URL) and the exact body bytes. A
// refund's path holds the endToEndId of the Pix it returns, which is in no
// body, so the path is stored with the body. Submit sends Body byte for
// byte (R5).
type envelope struct {
	Path string          `json:"path"`
	Body json.RawMessage `json:"body"`
}

// EncodePayload builds the request of one operation, a pure function of in
// and reference:
//
//   - pix_charge: PUT /cob/{txid} with calendario.expiracao, valor.original,
//     chave (the receiving key), devedor (when the payer's tax id AND name
//     are known: the standard requires both) and solicitacaoPagador;
//   - refund: PUT /pix/{e2eid}/devolucao/{id} with valor, natureza ORIGINAL
//     and descricao; the e2eid is in.ChargeProviderID (a paid cob's
//     provider id is the endToEndId of the Pix that paid it);
//   - pix_transfer, bank_payout: the SendAPI's PUT.
//
// Metadata is never sent: what a cob carries is shown to the payer.
func (p *Provider) EncodePayload(in providers.OperationInput, reference string) ([]byte, error) {
	if !p.Capabilities().Supports(in.Operation) {
		return nil, fmt.Errorf("%w: %s", providers.ErrUnsupported, in.Operation)
	}
	invalid := func(err error) error { return fmt.Errorf("%w: %w", providers.ErrInvalidInput, err) }
	if in.Operation != providers.OpPixCharge && (in.ExpiresIn != 0 || in.PayerName != "" || in.PayerTaxID != "") {
		return nil, invalid(errors.New("expiry and payer only apply to pix_charge"))
	}
	var env envelope
	var err error
	switch in.Operation {
	case providers.OpPixCharge:
		if !txidRe.MatchString(reference) {
			return nil, invalid(fmt.Errorf("a txid is 26-35 letters or digits, got %q", reference))
		}
		env.Path = "/cob/" + reference
		env.Body, err = p.encodeCob(in)
	case providers.OpRefund:
		if !idRe.MatchString(reference) {
			return nil, invalid(fmt.Errorf("a devolucao id is 1-35 letters or digits, got %q", reference))
		}
		if !e2eRe.MatchString(in.ChargeProviderID) {
			return nil, invalid(fmt.Errorf("a Pix refund needs the endToEndId of the paid Pix (32 letters or digits) as the charge's provider id, got %q",
				in.ChargeProviderID))
		}
		env.Path = "/pix/" + in.ChargeProviderID + "/devolucao/" + reference
		env.Body, err = encodeDevolucao(in)
	case providers.OpPixTransfer, providers.OpBankPayout:
		if !idRe.MatchString(reference) {
			return nil, invalid(fmt.Errorf("an idEnvio is 1-35 letters or digits, got %q", reference))
		}
		env.Path = p.cfg.Send.SendPath(reference)
		env.Body, err = p.cfg.Send.EncodeSend(in, p.cfg.PayerKey)
	}
	if err != nil {
		return nil, invalid(err)
	}
	if in.Operation == providers.OpRefund {
		p.remember(reference, in.ChargeProviderID)
	}
	return json.Marshal(env)
}

func (p *Provider) encodeCob(in providers.OperationInput) ([]byte, error) {
	v, err := valor(in.Amount, in.Currency)
	if err != nil {
		return nil, err
	}
	if in.ExpiresIn < 0 {
		return nil, errors.New("negative cob expiry")
	}
	if err := text("description", in.Description, 140); err != nil {
		return nil, err
	}
	exp := int64((in.ExpiresIn + time.Second - 1) / time.Second)
	if exp == 0 {
		exp = 86400 // the standard's default, written out so the expiry is ours
	}
	if exp > 1<<31-1 {
		return nil, errors.New("cob expiry too long")
	}
	body := cobRequest{Calendario: cobCalendario{Expiracao: exp}, Valor: cobValor{Original: v}, Chave: p.cfg.ReceivingKey,
		SolicitacaoPagador: in.Description}
	if in.PayerTaxID != "" && in.PayerName != "" {
		cpf, cnpj, err := taxID(in.PayerTaxID)
		if err != nil {
			return nil, fmt.Errorf("payer_tax_id: %w", err)
		}
		if err := text("payer_name", in.PayerName, 200); err != nil {
			return nil, err
		}
		body.Devedor = &pessoa{CPF: cpf, CNPJ: cnpj, Nome: in.PayerName}
	}
	return json.Marshal(body)
}

func encodeDevolucao(in providers.OperationInput) ([]byte, error) {
	v, err := valor(in.Amount, in.Currency)
	if err != nil {
		return nil, err
	}
	if err := text("description", in.Description, 140); err != nil {
		return nil, err
	}
	if in.Destination != nil {
		return nil, errors.New("a refund goes back to the payer: no destination")
	}
	return json.Marshal(devolucaoRequest{Valor: v, Natureza: "ORIGINAL", Descricao: in.Description})
}

func (p *Provider) remember(reference, e2e string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.refunds[reference]; ok {
		return
	}
	p.refunds[reference] = e2e
	p.refundFIFO = append(p.refundFIFO, reference)
	if len(p.refundFIFO) > maxRemembered {
		delete(p.refunds, p.refundFIFO[0])
		p.refundFIFO = p.refundFIFO[1:]
	}
}

func (p *Provider) remembered(reference string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refunds[reference]
}

func (p *Provider) base(op providers.Operation) string {
	if op == providers.OpPixTransfer || op == providers.OpBankPayout {
		return p.cfg.SendBaseURL
	}
	return p.cfg.BaseURL
}

// do makes one exchange with a bearer token. The token comes first and is
// not part of the exchange: when it cannot be had, the returned Exchange
// has no connection, nothing written and the token error, which the
// classifier reads as not sent. A 401 drops the token and the request is
// sent once more with a fresh one (a 401 proves nothing was processed);
// the second exchange is returned, with both counted in WireCalls.
//
// Every exchange returned is redacted: a PSP or gateway that quotes the
// bearer token it refused (or the client secret, in a token error) would
// otherwise put it in the body, the failure reason and the attempt's
// last_error, events and logs.
func (p *Provider) do(ctx context.Context, method, u string, body []byte) providers.Exchange {
	tok, err := p.tokens.token(ctx)
	if err != nil {
		now := time.Now()
		return p.redact(providers.Exchange{Method: method, URL: u, Err: err, Started: now, Ended: now})
	}
	ex := p.client.Do(ctx, method, u, bearer(tok), body)
	if ex.StatusCode != http.StatusUnauthorized || ex.Err != nil {
		return p.redact(ex, tok)
	}
	p.tokens.invalidate(tok)
	tok2, err := p.tokens.token(ctx)
	if err != nil {
		return p.redact(ex, tok) // the 401 stands: nothing was processed
	}
	ex2 := p.client.Do(ctx, method, u, bearer(tok2), body)
	ex2.WireCalls += ex.WireCalls
	ex2.Started = ex.Started
	return p.redact(ex2, tok, tok2)
}

// redacted replaces a credential quoted in an answer or an error.
const redacted = "[redacted]"

// redact removes the client secret and the access tokens used from ex's
// body, header values and error text (the error's wrapping is kept when it
// carries neither).
func (p *Provider) redact(ex providers.Exchange, tokens ...string) providers.Exchange {
	secrets := make([]string, 0, len(tokens)+1)
	for _, s := range append(tokens, string(p.cfg.ClientSecret)) {
		if s != "" {
			secrets = append(secrets, s)
		}
	}
	for _, s := range secrets {
		if bytes.Contains(ex.Body, []byte(s)) {
			ex.Body = bytes.ReplaceAll(ex.Body, []byte(s), []byte(redacted))
		}
		if ex.Err != nil && strings.Contains(ex.Err.Error(), s) {
			ex.Err = errors.New(strings.ReplaceAll(ex.Err.Error(), s, redacted))
		}
		for k, vs := range ex.Header {
			for i, v := range vs {
				if strings.Contains(v, s) {
					ex.Header = ex.Header.Clone() // the client's own map stays as it was
					ex.Header[k][i] = strings.ReplaceAll(v, s, redacted)
				}
			}
		}
	}
	return ex
}

func bearer(tok string) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	h.Set("Accept", "application/json")
	return h
}

// Submit sends the stored request once (PUT, no idempotency header: the id
// in the path is the key) and reads the answer:
//
//   - 2xx: the operation's status (cob ATIVA: created, which is what Submit
//     reports for pix_charge; devolucao and send: EM_PROCESSAMENTO
//     processing, DEVOLVIDO / REALIZADO succeeded, NAO_REALIZADO failed).
//     An answer that names another id, no status saldo knows, or a provider
//     id that is not the BCB's shape (an endToEndId, an rtrId) has no
//     state: unknown;
//   - 409, or a 4xx saying the id is already used: duplicate, resolved by
//     lookup, never a new id;
//   - 400 (violacoes) and 422 (insufficient funds, refused): failed, with
//     the problem's type and the violated fields as the failure;
//   - 429: rate limited; 5xx, 408, cuts after the write: unknown.
func (p *Provider) Submit(ctx context.Context, req providers.SubmitRequest) providers.SubmitResult {
	var env envelope
	if err := json.Unmarshal(req.Payload, &env); err != nil || env.Path == "" || len(env.Body) == 0 {
		now := time.Now()
		return providers.SubmitResult{Exchange: providers.Exchange{Method: http.MethodPut, Err: fmt.Errorf(
			"pix: stored payload is not this adapter's: %v", err), Started: now, Ended: now}}
	}
	if !strings.HasSuffix(env.Path, "/"+req.Reference) {
		now := time.Now()
		return providers.SubmitResult{Exchange: providers.Exchange{Method: http.MethodPut, Err: fmt.Errorf(
			"pix: stored path %q does not end with the reference %q", env.Path, req.Reference), Started: now, Ended: now}}
	}
	if req.Operation == providers.OpRefund {
		if e2e := refundE2E(env.Path); e2e != "" {
			p.remember(req.Reference, e2e)
		}
	}
	ex := p.do(ctx, http.MethodPut, p.base(req.Operation)+env.Path, env.Body)
	res := providers.SubmitResult{Exchange: ex}
	if ex.StatusCode == 0 || ex.Err != nil {
		if ex.StatusCode == http.StatusTooManyRequests {
			res.Refinement = providers.RefineRateLimited
		}
		return res
	}
	if ex.StatusCode >= 200 && ex.StatusCode < 300 {
		var r read
		switch req.Operation {
		case providers.OpPixCharge:
			r = p.readCob(ex.Body, req.Reference, true)
		case providers.OpRefund:
			r = readDevolucao(ex.Body, req.Reference)
		default:
			r = p.readSend(ex.Body, req.Reference)
		}
		if r.ok && wellShaped(req.Operation, r.providerID) {
			res.ProviderID, res.State, res.Data = r.providerID, r.state, r.data
			res.FailureCode, res.FailureReason = r.failureCode, r.failureReason
			res.ExpectedBy = r.expectedBy
		}
		return res
	}
	prob, _ := parseProblem(ex.Body)
	res.FailureCode, res.FailureReason = prob.code(), prob.reason()
	if res.FailureCode == "" {
		res.FailureCode = "http_" + strconv.Itoa(ex.StatusCode)
	}
	switch {
	case ex.StatusCode == http.StatusTooManyRequests:
		res.Refinement = providers.RefineRateLimited
	case ex.StatusCode == http.StatusUnauthorized || ex.StatusCode == http.StatusForbidden:
		// Refused before anything was processed: a 401 even with a fresh
		// token (do renews it once), or a 403 (a scope or certificate the
		// PSP does not grant). The attempt waits for an operator to fix
		// the credentials instead of failing a payout nobody processed.
		p.cfg.Logger.Error("pix: request refused: the client credentials, scopes or certificate are wrong or revoked; attempts stay pending until an operator fixes them",
			"status", ex.StatusCode, "operation", string(req.Operation), "reference", req.Reference, "code", res.FailureCode)
		res.Refinement = providers.RefineAuthRefused
	case ex.StatusCode == http.StatusConflict:
		res.Refinement = providers.RefineDuplicate
	case ex.StatusCode >= 400 && ex.StatusCode < 500 && prob.duplicate():
		// The standard answers a devolucao id used before with a 400, and a
		// cob that exists and is no longer ATIVA with a 400 too: the
		// operation exists, query it.
		res.Refinement = providers.RefineDuplicate
	case ex.StatusCode == http.StatusBadRequest || ex.StatusCode == http.StatusUnprocessableEntity:
		res.Refinement = providers.RefineDeclined
	}
	return res
}

// refundE2E reads the e2eid out of /pix/{e2eid}/devolucao/{id}.
func refundE2E(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) == 4 && parts[0] == "pix" && parts[2] == "devolucao" {
		return parts[1]
	}
	return ""
}

// read is what an answer body says about an operation.
type read struct {
	ok            bool
	providerID    string
	state         providers.State
	failureCode   string
	failureReason string
	amount        string
	data          []byte
	// expectedBy: when the PSP's answer says the operation ends at the
	// latest (an ATIVA cob: its expiry plus ExpiryGrace); zero otherwise.
	expectedBy time.Time
}

// CobData is a pix_charge's Data, in the shape package charges reads
// (txid, status, expires_at, location, pix_copia_e_cola, paid_at), plus
// the endToEndId of the Pix that paid it.
type CobData struct {
	TxID       string    `json:"txid"`
	Status     string    `json:"status"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	Location   string    `json:"location,omitempty"`
	CopyPaste  string    `json:"pix_copia_e_cola,omitempty"`
	PaidAt     time.Time `json:"paid_at,omitzero"`
	EndToEndID string    `json:"end_to_end_id,omitempty"`
}

// readCob reads a cob. created: the answer to our PUT, where ATIVA means
// "created" (succeeded, the Submit contract for pix_charge; the attempts
// core keeps the attempt open). For a lookup ATIVA is processing until the
// expiry (plus ExpiryGrace) has passed, then failed cob_expired; CONCLUIDA
// is succeeded with the paying Pix's endToEndId as the provider id and its
// valor as the amount (valor.original when it has none), processing while
// no Pix names an endToEndId; a removed cob is failed. An ATIVA cob whose
// expiry is known is expected to end by its expiry plus ExpiryGrace (paid
// before, failed cob_expired after): its expectedBy, so that the attempts
// core's review of a long "processing" ages from it rather than from a
// fixed delay shorter than the cob (R18).
func (p *Provider) readCob(body []byte, txid string, created bool) read {
	var c cob
	if err := json.Unmarshal(body, &c); err != nil || c.TxID != txid {
		return read{}
	}
	d := CobData{TxID: c.TxID, Status: c.Status, Location: c.Location, CopyPaste: c.PixCopiaECola}
	if c.Calendario.Criacao != nil {
		// An absent expiracao is the description's default (24 h), not 0:
		// read as 0 an ATIVA cob would fail cob_expired while it can still
		// be paid. One too large for a Duration leaves the expiry unknown
		// (ATIVA stays processing).
		exp := int64(DefaultCobExpiracao)
		if c.Calendario.Expiracao != nil {
			exp = *c.Calendario.Expiracao
		}
		if exp >= 0 && exp <= int64(math.MaxInt64/time.Second) {
			d.ExpiresAt = c.Calendario.Criacao.Add(time.Duration(exp) * time.Second).UTC()
		}
	}
	r := read{ok: true, amount: c.Valor.Original}
	switch c.Status {
	case CobAtiva:
		if !d.ExpiresAt.IsZero() {
			r.expectedBy = d.ExpiresAt.Add(p.cfg.ExpiryGrace)
		}
		switch {
		case created:
			r.state = providers.StateSucceeded
		case !d.ExpiresAt.IsZero() && p.cfg.Now().After(d.ExpiresAt.Add(p.cfg.ExpiryGrace)):
			r.state, r.failureCode = providers.StateFailed, FailureCobExpired
			r.failureReason = "cob expired unpaid at " + d.ExpiresAt.Format(time.RFC3339)
		default:
			r.state = providers.StateProcessing
		}
	case CobConcluida:
		// Paid, but succeeded only with the Pix that paid it: its
		// endToEndId is the charge's provider id, which every refund of it
		// needs. The description makes the pix array optional; a CONCLUIDA
		// cob without a Pix that names an endToEndId is not yet conclusive
		// (processing) and the attempt stays open until a lookup or the
		// webhook names it. The amount is the Pix's valor when it has one,
		// else valor.original (never an empty valor over a readable one).
		r.state = providers.StateProcessing
		for _, px := range c.Pix {
			if (px.TxID != "" && px.TxID != txid) || px.EndToEndID == "" {
				continue
			}
			r.state, r.providerID = providers.StateSucceeded, px.EndToEndID
			if !blank(px.Valor) {
				r.amount = px.Valor
			}
			d.EndToEndID, d.PaidAt = px.EndToEndID, px.Horario.UTC()
			break
		}
	case CobRemovidaRecebedor, "REMOVIDO_PELO_USUARIO_RECEBEDOR":
		r.state, r.failureCode, r.failureReason = providers.StateFailed, FailureCobRemoved, "cob removed by the receiver"
	case CobRemovidaPSP, "REMOVIDO_PELO_PSP":
		r.state, r.failureCode, r.failureReason = providers.StateFailed, FailureCobRemoved, "cob removed by the PSP"
		if !d.ExpiresAt.IsZero() && p.cfg.Now().After(d.ExpiresAt) {
			r.failureCode = FailureCobExpired
		}
	default:
		return read{} // a status we do not know: no state, unknown
	}
	r.data, _ = json.Marshal(d)
	return r
}

// RefundData is a refund's Data.
type RefundData struct {
	ID         string    `json:"id"`
	RtrID      string    `json:"rtr_id,omitempty"`
	EndToEndID string    `json:"end_to_end_id,omitempty"`
	Status     string    `json:"status"`
	Motivo     string    `json:"motivo,omitempty"`
	SettledAt  time.Time `json:"settled_at,omitzero"`
}

func readDevolucao(body []byte, id string) read {
	var d devolucao
	if err := json.Unmarshal(body, &d); err != nil || d.ID != id {
		return read{}
	}
	return devolucaoRead(d, "")
}

func devolucaoRead(d devolucao, e2e string) read {
	r := read{ok: true, providerID: d.RtrID, amount: d.Valor}
	switch d.Status {
	case DevolucaoEmProcessamento:
		r.state = providers.StateProcessing
	case DevolucaoDevolvido:
		r.state = providers.StateSucceeded
	case DevolucaoNaoRealizado:
		r.state, r.failureCode, r.failureReason = providers.StateFailed, FailureNaoRealizado, d.Motivo
		if r.failureReason == "" {
			r.failureReason = "devolucao NAO_REALIZADO"
		}
	default:
		return read{}
	}
	rd := RefundData{ID: d.ID, RtrID: d.RtrID, EndToEndID: e2e, Status: d.Status, Motivo: d.Motivo}
	if d.Horario.Liquidacao != nil {
		rd.SettledAt = d.Horario.Liquidacao.UTC()
	}
	r.data, _ = json.Marshal(rd)
	return r
}

// SendData is a send's Data.
type SendData struct {
	IDEnvio    string `json:"id_envio"`
	EndToEndID string `json:"end_to_end_id,omitempty"`
	Status     string `json:"status"`
}

func (p *Provider) readSend(body []byte, id string) read {
	s, err := p.cfg.Send.ParseSend(body)
	if err != nil || s.IDEnvio != id || s.State == "" {
		return read{}
	}
	return sendRead(s)
}

func sendRead(s Send) read {
	r := read{ok: true, providerID: s.EndToEndID, state: s.State, amount: s.Valor}
	if s.State == providers.StateFailed {
		r.failureCode, r.failureReason = FailureNaoRealizado, s.Motivo
		if r.failureReason == "" {
			r.failureReason = "send " + s.Status
		}
	}
	r.data, _ = json.Marshal(SendData{IDEnvio: s.IDEnvio, EndToEndID: s.EndToEndID, Status: s.Status})
	return r
}

// Recall is providers.Recaller: the attempts core hands over a refund
// attempt's stored payload before its lookup, whose path names the
// endToEndId of the Pix it returns, so a process that never saw the refund
// (a restart) looks it up with one GET instead of a search.
func (p *Provider) Recall(op providers.Operation, reference string, payload []byte) {
	if op != providers.OpRefund {
		return
	}
	var env envelope
	if json.Unmarshal(payload, &env) != nil || !strings.HasSuffix(env.Path, "/"+reference) {
		return
	}
	if e2e := refundE2E(env.Path); e2e != "" {
		p.remember(reference, e2e)
	}
}

var _ providers.Recaller = (*Provider)(nil)

// Lookup reads the operation by our reference with one GET:
// GET /cob/{txid}, GET /pix/{e2eid}/devolucao/{id} or the SendAPI's
// LookupPath. 200 is found; 404 is "not found" (Found false, no error:
// proof of absence only after the consistency window, R16) when its body
// is the API's problem; anything else carries an Exchange.Err and proves
// nothing.
//
// A refund's path needs the endToEndId of the Pix it returns, which the
// reference alone does not give. The adapter remembers it from the payload
// (EncodePayload at open, Submit at every send); a process that saw
// neither (a restart, another process) searches the received Pix of the
// last RefundScan with devolucaoPresente=true page by page for the
// devolucao with our id; a search that finds nothing is inconclusive,
// never "not found" (see scanRefund). That search is many exchanges; the
// attempts core avoids it by handing the payload over first (Recall).
func (p *Provider) Lookup(ctx context.Context, op providers.Operation, reference string) (providers.LookupResult, error) {
	if !p.Capabilities().Supports(op) {
		return providers.LookupResult{}, fmt.Errorf("%w: lookup of %s", providers.ErrUnsupported, op)
	}
	var u string
	switch op {
	case providers.OpPixCharge:
		u = p.cfg.BaseURL + "/cob/" + url.PathEscape(reference)
	case providers.OpRefund:
		e2e := p.remembered(reference)
		if e2e == "" {
			return p.scanRefund(ctx, reference), nil
		}
		u = p.cfg.BaseURL + "/pix/" + e2e + "/devolucao/" + url.PathEscape(reference)
	default:
		u = p.cfg.SendBaseURL + p.cfg.Send.LookupPath(url.PathEscape(reference))
	}
	ex := p.do(ctx, http.MethodGet, u, nil)
	res := providers.LookupResult{Exchange: ex}
	if ex.Err == nil && ex.StatusCode == http.StatusNotFound {
		// Only the API's own "no such object" for this endpoint is
		// absence. A 404 without a problem body (a proxy's page) or with
		// another problem (a gateway's or framework's generic Not Found
		// for an unmapped route, during a deploy or an outage) says
		// nothing about the operation (R16).
		pr, ok := parseProblem(ex.Body)
		if !ok {
			res.Exchange.Err = fmt.Errorf("pix: lookup of %s %s: 404 without a problem body proves nothing", op, reference)
		} else if !p.notFoundCode(op, pr.code()) {
			res.Exchange.Err = fmt.Errorf("pix: lookup of %s %s: 404 %q is not this endpoint's \"not found\" and proves nothing", op, reference, pr.code())
		}
		return res, nil
	}
	if ex.Err != nil {
		return res, nil
	}
	if ex.StatusCode != http.StatusOK {
		// Only a 200 names the operation and only the API's 404 says it is
		// absent: a 201, 202 or 204 to a GET (a gateway, a PSP's "still
		// processing"), a 5xx, a 429 or a 401 names nothing (R16).
		res.Exchange.Err = fmt.Errorf("pix: lookup of %s %s: HTTP %d proves nothing", op, reference, ex.StatusCode)
		return res, nil
	}
	var r read
	switch op {
	case providers.OpPixCharge:
		r = p.readCob(ex.Body, reference, false)
	case providers.OpRefund:
		var d devolucao
		if json.Unmarshal(ex.Body, &d) == nil && d.ID == reference {
			r = devolucaoRead(d, p.remembered(reference))
		}
	default:
		r = p.readSend(ex.Body, reference)
	}
	if !r.ok {
		res.Exchange.Err = fmt.Errorf("pix: lookup of %s %s: unreadable answer", op, reference)
		return res, nil
	}
	return lookupResult(res.Exchange, op, reference, r), nil
}

// lookupResult is a found operation, or an inconclusive answer (Found
// false, Exchange.Err set: it proves nothing, R16) when the answer is not
// the provider's word on it: a final state without a valor (R17: an
// amount-less report would move money with no amount check), or a
// provider id that is not the BCB's shape (an endToEndId or an rtrId:
// E or D and 31 letters or digits).
func lookupResult(ex providers.Exchange, op providers.Operation, reference string, r read) providers.LookupResult {
	if problem := itemProblem(op, r.providerID, r.state, r.amount); problem != "" {
		ex.Err = fmt.Errorf("pix: lookup of %s %s: %s", op, reference, problem)
		return providers.LookupResult{Exchange: ex}
	}
	return providers.LookupResult{Exchange: ex, Found: true, ProviderID: r.providerID, State: r.state,
		Amount: r.amount, Currency: "BRL", FailureCode: r.failureCode, FailureReason: r.failureReason, Data: r.data,
		ExpectedBy: r.expectedBy}
}

// itemProblem is why an answer or notice about op is not the PSP's word on
// it ("" when it is): a provider id not of the BCB's shape, or a final
// state without a valor (R17: it would move money with no amount check).
func itemProblem(op providers.Operation, providerID string, state providers.State, valor string) string {
	if !wellShaped(op, providerID) {
		return fmt.Sprintf("provider id %.40q is not an endToEndId or rtrId of the BCB's shape", providerID)
	}
	if final(state) && blank(valor) {
		return fmt.Sprintf("%s without a valor is not the provider's word on the amount (R17)", state)
	}
	return ""
}

// final reports whether s settles an operation (money moves or is freed).
func final(s providers.State) bool {
	return s == providers.StateSucceeded || s == providers.StateFailed
}

// blank reports whether a valor is missing: no amount to check.
func blank(v string) bool { return strings.TrimSpace(v) == "" }

// wellShaped reports whether id, the provider id an answer or notice gives
// for op, is empty or the BCB's shape: an rtrId for a refund (a
// devolucao), an endToEndId otherwise. An id of another shape is not one
// the SPI gave (and one of kilobytes would not even fit the attempts'
// provider id index).
func wellShaped(op providers.Operation, id string) bool {
	switch {
	case id == "":
		return true
	case op == providers.OpRefund:
		return rtrRe.MatchString(id)
	default:
		return e2eRe.MatchString(id)
	}
}

// maxPages bounds any paginated walk.
const maxPages = 10000

// scanRefund finds a devolucao by id among the received Pix of the last
// RefundScan (GET /pix?devolucaoPresente=true, every page). A page that
// fails ends the search with that page's exchange. A full walk that finds
// nothing proves nothing either (a list may lag or leave Pix out, and a
// refund failed on it could be retried under a new id and paid twice): the
// answer carries an error, so the attempts core never reads it as "not
// found"; such a refund resolves by webhook, by a process that knows its
// endToEndId, or in review.
// notFoundCode reports whether a 404 problem's code is the API's answer
// for "no such object" at op's lookup endpoint: CobNaoEncontrado for GET
// /cob/{txid} and PixDevolucaoNaoEncontrada for GET
// /pix/{e2eid}/devolucao/{id} (the BCB API Pix's error types), the send
// API's own code for a send.
func (p *Provider) notFoundCode(op providers.Operation, code string) bool {
	switch op {
	case providers.OpPixCharge:
		return code == "CobNaoEncontrado"
	case providers.OpRefund:
		return code == "PixDevolucaoNaoEncontrada"
	default:
		return p.cfg.Send.SendNotFound(code)
	}
}

func (p *Provider) scanRefund(ctx context.Context, id string) providers.LookupResult {
	now := p.cfg.Now().UTC()
	var last providers.Exchange
	for page := 0; page < maxPages; page++ {
		list, ex, err := p.pixPage(ctx, now.Add(-p.cfg.RefundScan), now, page, true)
		last = ex
		if err != nil {
			return providers.LookupResult{Exchange: ex}
		}
		for _, px := range list.Pix {
			for _, d := range px.Devolucoes {
				if d.ID == id {
					if !e2eRe.MatchString(px.EndToEndID) {
						ex.Err = fmt.Errorf("pix: devolucao %s: the Pix it returns has no endToEndId of the BCB's shape", id)
						return providers.LookupResult{Exchange: ex}
					}
					p.remember(id, px.EndToEndID)
					if r := devolucaoRead(d, px.EndToEndID); r.ok {
						return lookupResult(ex, providers.OpRefund, id, r)
					}
					ex.Err = fmt.Errorf("pix: devolucao %s has unknown status %q", id, d.Status)
					return providers.LookupResult{Exchange: ex}
				}
			}
		}
		if list.Parametros.Paginacao.PaginaAtual+1 >= list.Parametros.Paginacao.QuantidadeDePaginas {
			break
		}
	}
	last.Err = fmt.Errorf("pix: devolucao %s not among the received Pix of the last %s: that proves nothing without the Pix's endToEndId",
		id, p.cfg.RefundScan)
	return providers.LookupResult{Exchange: last}
}

// pixPage fetches one page of GET /pix. err is set (and in ex.Err) for any
// answer but a readable 200.
func (p *Provider) pixPage(ctx context.Context, from, to time.Time, page int, withRefunds bool) (pixList, providers.Exchange, error) {
	q := url.Values{}
	q.Set("inicio", from.UTC().Format(time.RFC3339Nano))
	q.Set("fim", to.UTC().Format(time.RFC3339Nano))
	if withRefunds {
		q.Set("devolucaoPresente", "true")
	}
	q.Set("paginacao.paginaAtual", strconv.Itoa(page))
	q.Set("paginacao.itensPorPagina", strconv.Itoa(p.cfg.PageSize))
	ex := p.do(ctx, http.MethodGet, p.cfg.BaseURL+"/pix?"+q.Encode(), nil)
	var l pixList
	if ex.Err == nil && ex.StatusCode != http.StatusOK {
		ex.Err = fmt.Errorf("pix: GET /pix: status %d", ex.StatusCode)
	}
	if ex.Err == nil {
		if err := json.Unmarshal(ex.Body, &l); err != nil {
			ex.Err = fmt.Errorf("pix: GET /pix: %w", err)
		}
	}
	return l, ex, ex.Err
}

// ErrStatement is returned (wrapped) when a statement could not be fetched.
var ErrStatement = errors.New("pix: statement unavailable")

// RefundWindowDays is how long after a Pix its receiver may return it
// (devolucao): 90 days, in the Pix rules.
const RefundWindowDays = 90

// StatementDating is how Statement dates its lines (R19). A Pix received
// and a send are listed on the day they happened, as saldo records them. A
// devolucao is listed with the Pix it returns, on the day that Pix was
// received, which may be up to RefundWindowDays before the day saldo
// recorded the refund (providers.StatementDater).
func (p *Provider) StatementDating() map[providers.Operation]providers.StatementDating {
	return map[providers.Operation]providers.StatementDating{
		providers.OpPixCharge:   providers.DefaultStatementDating,
		providers.OpPixTransfer: providers.DefaultStatementDating,
		providers.OpBankPayout:  providers.DefaultStatementDating,
		providers.OpRefund:      {Before: RefundWindowDays + 1, After: 1},
	}
}

// Statement lists the UTC day that contains day: the Pix received
// (GET /pix?inicio&fim, every page: pix_charge entries, reference = txid,
// provider id = endToEndId; Pix without a txid are listed with an empty
// reference), the devolucoes of those Pix (refund entries, reference = our
// id), and the sends (the SendAPI's list, reference = idEnvio, with no
// operation: pix_transfer and bank_payout share the endpoint, and a
// pix_transfer may go to a bank account). A devolucao of a Pix
// received on an earlier day is listed on that Pix's day only: the
// standard lists Pix by when they were received.
func (p *Provider) Statement(ctx context.Context, day time.Time) ([]providers.StatementEntry, error) {
	from := time.Date(day.UTC().Year(), day.UTC().Month(), day.UTC().Day(), 0, 0, 0, 0, time.UTC)
	to := from.Add(24*time.Hour - time.Nanosecond)
	date := from.Format(time.DateOnly)
	var out []providers.StatementEntry
	if p.cfg.BaseURL != "" {
		for page := 0; page < maxPages; page++ {
			list, _, err := p.pixPage(ctx, from, to, page, false)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: received page %d: %w", ErrStatement, date, page, err)
			}
			for _, px := range list.Pix {
				out = append(out, providers.StatementEntry{Operation: providers.OpPixCharge, Reference: px.TxID,
					ProviderID: px.EndToEndID, State: providers.StateSucceeded, Amount: px.Valor, Currency: "BRL", At: px.Horario})
				for _, d := range px.Devolucoes {
					r := devolucaoRead(d, px.EndToEndID)
					at := px.Horario
					if d.Horario.Liquidacao != nil {
						at = *d.Horario.Liquidacao
					} else if d.Horario.Solicitacao != nil {
						at = *d.Horario.Solicitacao
					}
					out = append(out, providers.StatementEntry{Operation: providers.OpRefund, Reference: d.ID,
						ProviderID: d.RtrID, State: r.state, Amount: d.Valor, Currency: "BRL", At: at})
				}
			}
			if list.Parametros.Paginacao.PaginaAtual+1 >= list.Parametros.Paginacao.QuantidadeDePaginas {
				break
			}
		}
	}
	if p.cfg.SendBaseURL != "" {
		for page := 0; page < maxPages; page++ {
			q := url.Values{}
			q.Set("inicio", from.Format(time.RFC3339Nano))
			q.Set("fim", to.Format(time.RFC3339Nano))
			q.Set("paginacao.paginaAtual", strconv.Itoa(page))
			q.Set("paginacao.itensPorPagina", strconv.Itoa(p.cfg.PageSize))
			ex := p.do(ctx, http.MethodGet, p.cfg.SendBaseURL+p.cfg.Send.ListPath()+"?"+q.Encode(), nil)
			if ex.Err != nil {
				return nil, fmt.Errorf("%w: %s: sends page %d: %w", ErrStatement, date, page, ex.Err)
			}
			if ex.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("%w: %s: sends page %d: status %d", ErrStatement, date, page, ex.StatusCode)
			}
			sends, pg, err := p.cfg.Send.ParseSendList(ex.Body)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: sends page %d: %w", ErrStatement, date, page, err)
			}
			for _, s := range sends {
				at := s.Liquidacao
				if at.IsZero() {
					at = s.Solicitacao
				}
				// No operation: pix_transfer and bank_payout share the send
				// endpoint, and a pix_transfer may go to a bank account, so
				// the destination does not say which (reconciliation matches
				// by reference and amount).
				out = append(out, providers.StatementEntry{Reference: s.IDEnvio, ProviderID: s.EndToEndID,
					State: s.State, Amount: s.Valor, Currency: "BRL", At: at})
			}
			if pg.Atual+1 >= pg.Paginas {
				break
			}
		}
	}
	return out, nil
}
