package pixtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// Paths of the fake: the standard API lives under /api/v2 (a path prefix,
// as PSPs have), the send API at the root (/v2/gn/...), the token endpoint
// at /oauth/token.
const (
	StandardPrefix = "/api/v2"
	TokenPath      = "/oauth/token"
	// ISPB of the fake PSP, in the ids it makes.
	ISPB = "09089356"
)

// Options configure a Server.
type Options struct {
	ClientID     string
	ClientSecret string
	// TokenLifetime is the expires_in of issued tokens. Default 1h.
	TokenLifetime time.Duration
	// ReceivingKey is the account's Pix key: cobs must name it, sends
	// must pay from it.
	ReceivingKey string
	// LookupLag hides a new operation from GETs for this long.
	LookupLag time.Duration
	// Balance (decimal) of the account; a send above it is 422. Default
	// 1000000.00.
	Balance string
	// SendsFinal: a send is REALIZADO at once. Otherwise EM_PROCESSAMENTO
	// until SettleSend.
	SendsFinal bool
	// RefundsFinal: a devolucao is DEVOLVIDO at once. Otherwise
	// EM_PROCESSAMENTO until SettleRefund.
	RefundsFinal bool
}

// Request is one request the server received.
type Request struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

// Server is the fake PSP.
type Server struct {
	srv  *httptest.Server
	opts Options

	mu        sync.Mutex
	requests  []Request
	tokens    map[string]bool
	tokenReqs int
	hang      int
	lose      int
	canned    []canned
	cobs      map[string]*cobState
	pix       map[string]*pixState // by e2e
	sends     map[string]*sendState
	balance   decimal.Decimal
	seq       int
}

type canned struct {
	status int
	body   string
}

type cobState struct {
	txid      string
	created   time.Time
	expiracao int64
	valor     string
	chave     string
	devedor   json.RawMessage
	solic     string
	status    string
	e2e       string
	visible   time.Time
}

type pixState struct {
	e2e     string
	txid    string
	valor   decimal.Decimal
	horario time.Time
	devs    []*devState
}

type devState struct {
	id, rtr   string
	valor     decimal.Decimal
	status    string
	requested time.Time
	settled   *time.Time
	visible   time.Time
}

type sendState struct {
	id, e2e    string
	valor      string
	chave      string
	favorecido json.RawMessage
	status     string
	requested  time.Time
	settled    *time.Time
	visible    time.Time
	info       string
	returns    []*devState // devolucoes of the send by its receiver's bank
}

// NewServer starts the fake on 127.0.0.1 with mutual TLS.
func NewServer(certs *Certs, opts Options) *Server {
	if opts.TokenLifetime <= 0 {
		opts.TokenLifetime = time.Hour
	}
	if opts.Balance == "" {
		opts.Balance = "1000000.00"
	}
	s := &Server{opts: opts, tokens: map[string]bool{}, cobs: map[string]*cobState{}, pix: map[string]*pixState{},
		sends: map[string]*sendState{}, balance: decimal.RequireFromString(opts.Balance)}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.TLS = certs.ServerTLS()
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are tests, not noise
	s.srv.StartTLS()
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// URL is the server's root.
func (s *Server) URL() string { return s.srv.URL }

// StandardURL is the standard API's base URL (with its prefix).
func (s *Server) StandardURL() string { return s.srv.URL + StandardPrefix }

// SendURL is the send API's base URL.
func (s *Server) SendURL() string { return s.srv.URL }

// TokenURL is the token endpoint.
func (s *Server) TokenURL() string { return s.srv.URL + TokenPath }

// Requests returns the API requests received (token requests excluded).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count counts API requests with this method and path.
func (s *Server) Count(method, path string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Method == method && r.Path == path {
			n++
		}
	}
	return n
}

// TokenRequests counts token requests.
func (s *Server) TokenRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenReqs
}

// RevokeTokens makes every issued token invalid: the next API call is 401.
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]bool{}
}

// HangAfterCommit makes the next n PUTs commit the operation and then never
// answer: the handler waits until the client gives up.
func (s *Server) HangAfterCommit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = n
}

// LoseNext makes the next n PUTs vanish: the request is read, nothing is
// made, and no answer ever comes (the client times out after writing).
func (s *Server) LoseNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lose = n
}

// FailNext answers the next API request with status and body
// (application/problem+json when body starts with '{') without processing
// it.
func (s *Server) FailNext(status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.canned = append(s.canned, canned{status, body})
}

// nextID is an id of n characters (n >= 20) the fake gives: an
// endToEndId or rtrId (32: prefix, ISPB, the minute, a sequence, random
// hex, as the BCB shapes them), a devolucao id (20). Unique per fake:
// every id holds the fake's own sequence number, whole. Before, a
// 20-character id was cut inside the minute (to its ten minutes), so two
// returns (ReturnSend) within ten minutes had the same devolucao id.
func (s *Server) nextID(prefix string, n int) string {
	s.seq++
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	head := prefix + ISPB
	if at := time.Now().UTC().Format("200601021504"); len(head)+len(at)+4 <= n {
		// Room for the minute and the sequence: wraps at 10000 within a
		// minute only, and the random hex tells those apart.
		id := head + at + fmt.Sprintf("%04d", s.seq%10000) + hex.EncodeToString(b)
		return id[:n]
	}
	return head + fmt.Sprintf("%0*d", n-len(head), s.seq)
}

// PayCob pays the cob txid with its original amount (or with valor when
// given): the cob becomes CONCLUIDA and a received Pix exists. It returns
// the Pix's endToEndId.
func (s *Server) PayCob(txid string, valor ...string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cobs[txid]
	if !ok {
		return "", fmt.Errorf("pixtest: no cob %s", txid)
	}
	if c.status != "ATIVA" {
		return "", fmt.Errorf("pixtest: cob %s is %s", txid, c.status)
	}
	v := c.valor
	if len(valor) > 0 {
		v = valor[0]
	}
	e2e := s.nextID("E", 32)
	c.status, c.e2e = "CONCLUIDA", e2e
	s.pix[e2e] = &pixState{e2e: e2e, txid: txid, valor: decimal.RequireFromString(v), horario: time.Now().UTC()}
	return e2e, nil
}

// RemoveCob removes an ATIVA cob, as its receiver (PATCH status
// REMOVIDA_PELO_USUARIO_RECEBEDOR) or the PSP would.
func (s *Server) RemoveCob(txid string, byPSP bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cobs[txid]
	if !ok || c.status != "ATIVA" {
		return fmt.Errorf("pixtest: no active cob %s", txid)
	}
	c.status = "REMOVIDA_PELO_USUARIO_RECEBEDOR"
	if byPSP {
		c.status = "REMOVIDA_PELO_PSP"
	}
	return nil
}

// ReceivePix records a Pix received without a cob (txid may be empty).
func (s *Server) ReceivePix(txid, valor string, at time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	e2e := s.nextID("E", 32)
	s.pix[e2e] = &pixState{e2e: e2e, txid: txid, valor: decimal.RequireFromString(valor), horario: at.UTC()}
	return e2e
}

// SettleSend moves a send to REALIZADO (ok) or NAO_REALIZADO.
func (s *Server) SettleSend(id string, ok bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sd, found := s.sends[id]
	if !found {
		return fmt.Errorf("pixtest: no send %s", id)
	}
	now := time.Now().UTC()
	sd.settled = &now
	sd.status = "NAO_REALIZADO"
	if ok {
		sd.status = "REALIZADO"
	}
	return nil
}

// ReturnSend makes the receiver's bank return valor (all of the send or a
// part) of the REALIZADO send id: a devolucao DEVOLVIDO of our Pix, the
// money back in the account. It returns the devolucao's rtrId. The
// notice of it is ReturnNotice.
func (s *Server) ReturnSend(id, valor string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sd, ok := s.sends[id]
	if !ok {
		return "", fmt.Errorf("pixtest: no send %s", id)
	}
	if sd.status != "REALIZADO" {
		return "", fmt.Errorf("pixtest: send %s is %s, only a REALIZADO send can be returned", id, sd.status)
	}
	v, err := decimal.NewFromString(valor)
	if err != nil || !v.IsPositive() {
		return "", fmt.Errorf("pixtest: return valor %q", valor)
	}
	left := decimal.RequireFromString(sd.valor)
	for _, d := range sd.returns {
		left = left.Sub(d.valor)
	}
	if v.GreaterThan(left) {
		return "", fmt.Errorf("pixtest: return of %s exceeds the %s left of send %s", valor, left, id)
	}
	now := time.Now().UTC()
	d := &devState{id: s.nextID("R", 20), rtr: s.nextID("D", 32), valor: v, status: "DEVOLVIDO", requested: now,
		settled: &now, visible: now}
	sd.returns = append(sd.returns, d)
	s.balance = s.balance.Add(v)
	return d.rtr, nil
}

// ReturnNotice is the body the PSP POSTs to the webhook when the send id
// has been returned (ReturnSend): in the BCB's shape, the Pix named by its
// endToEndId and valor (the send's), no txid, with its devolucoes. Efí's
// own shape for this notice is not confirmed by its public documentation;
// this is the standard's (see providers/pix.ParseWebhookEvents).
func (s *Server) ReturnNotice(id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sd, ok := s.sends[id]
	if !ok || len(sd.returns) == 0 {
		return nil, fmt.Errorf("pixtest: send %s has no return", id)
	}
	devs := make([]any, 0, len(sd.returns))
	for _, d := range sd.returns {
		devs = append(devs, devJSON(d))
	}
	item := map[string]any{"endToEndId": sd.e2e, "valor": sd.valor, "chave": sd.chave,
		"horario": sd.settled.Format(time.RFC3339Nano), "devolucoes": devs}
	return json.Marshal(map[string]any{"pix": []any{item}})
}

// SettleRefund moves a devolucao to DEVOLVIDO (ok) or NAO_REALIZADO.
func (s *Server) SettleRefund(id string, ok bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pix {
		for _, d := range p.devs {
			if d.id == id {
				now := time.Now().UTC()
				d.settled = &now
				d.status = "NAO_REALIZADO"
				if ok {
					d.status = "DEVOLVIDO"
				}
				return nil
			}
		}
	}
	return fmt.Errorf("pixtest: no devolucao %s", id)
}

// CobStatus, SendStatus and RefundStatus report an object's status ("" when
// it does not exist).
func (s *Server) CobStatus(txid string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cobs[txid]; ok {
		return c.status
	}
	return ""
}

func (s *Server) SendStatus(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sd, ok := s.sends[id]; ok {
		return sd.status
	}
	return ""
}

func (s *Server) RefundStatus(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pix {
		for _, d := range p.devs {
			if d.id == id {
				return d.status
			}
		}
	}
	return ""
}

// --- HTTP ---

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Problem is a problem+json body.
type Problem struct {
	Type      string     `json:"type"`
	Title     string     `json:"title"`
	Status    int        `json:"status"`
	Detail    string     `json:"detail,omitempty"`
	Violacoes []Violacao `json:"violacoes,omitempty"`
}

// Violacao is one violated rule.
type Violacao struct {
	Razao       string `json:"razao"`
	Propriedade string `json:"propriedade"`
	Valor       string `json:"valor,omitempty"`
}

func problem(w http.ResponseWriter, status int, typ, title, detail string, v ...Violacao) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: "https://pix.bcb.gov.br/api/v2/error/" + typ, Title: title,
		Status: status, Detail: detail, Violacoes: v})
}

func efiError(w http.ResponseWriter, status int, nome, mensagem string) {
	writeJSON(w, status, map[string]string{"nome": nome, "mensagem": mensagem})
}

var (
	valorRe = regexp.MustCompile(`^\d{1,10}\.\d{2}$`)
	txidRe  = regexp.MustCompile(`^[a-zA-Z0-9]{26,35}$`)
	idRe    = regexp.MustCompile(`^[a-zA-Z0-9]{1,35}$`)
)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.URL.Path == TokenPath {
		s.token(w, r, body)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: body})
	auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	valid := s.tokens[auth]
	var c *canned
	if valid && len(s.canned) > 0 {
		c = &s.canned[0]
		s.canned = s.canned[1:]
	}
	s.mu.Unlock()
	if !valid {
		problem(w, http.StatusUnauthorized, "AcessoNegado", "Não autorizado", "token de acesso inválido ou expirado")
		return
	}
	s.mu.Lock()
	lost := r.Method == http.MethodPut && s.lose > 0
	if lost {
		s.lose--
	}
	s.mu.Unlock()
	if lost {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return
	}
	if c != nil {
		if strings.HasPrefix(c.body, "{") {
			w.Header().Set("Content-Type", "application/problem+json")
		}
		w.WriteHeader(c.status)
		_, _ = io.WriteString(w, c.body)
		return
	}
	if r.Method == http.MethodPut && len(body) > 0 && r.Header.Get("Content-Type") != "application/json" {
		problem(w, http.StatusBadRequest, "RequisicaoInvalida", "Requisição inválida", "Content-Type must be application/json")
		return
	}
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, StandardPrefix+"/cob/"):
		txid := strings.TrimPrefix(path, StandardPrefix+"/cob/")
		switch r.Method {
		case http.MethodPut:
			s.putCob(w, r, txid, body)
		case http.MethodGet:
			s.getCob(w, txid)
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	case path == StandardPrefix+"/pix" && r.Method == http.MethodGet:
		s.listPix(w, r)
	case strings.HasPrefix(path, StandardPrefix+"/pix/"):
		parts := strings.Split(strings.TrimPrefix(path, StandardPrefix+"/pix/"), "/")
		if len(parts) != 3 || parts[1] != "devolucao" {
			problem(w, http.StatusNotFound, "NaoEncontrado", "Não encontrado", "")
			return
		}
		switch r.Method {
		case http.MethodPut:
			s.putDevolucao(w, r, parts[0], parts[2], body)
		case http.MethodGet:
			s.getDevolucao(w, parts[0], parts[2])
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	case path == "/v2/gn/pix/enviados" && r.Method == http.MethodGet:
		s.listSends(w, r)
	case strings.HasPrefix(path, "/v2/gn/pix/enviados/id-envio/") && r.Method == http.MethodGet:
		s.getSend(w, strings.TrimPrefix(path, "/v2/gn/pix/enviados/id-envio/"))
	case strings.HasPrefix(path, "/v2/gn/pix/") && r.Method == http.MethodPut:
		s.putSend(w, r, strings.TrimPrefix(path, "/v2/gn/pix/"), body)
	default:
		problem(w, http.StatusNotFound, "NaoEncontrado", "Não encontrado", "no such endpoint "+path)
	}
}

// token issues a client-credentials token: HTTP Basic client
// authentication, form body grant_type=client_credentials.
func (s *Server) token(w http.ResponseWriter, r *http.Request, body []byte) {
	s.mu.Lock()
	s.tokenReqs++
	s.mu.Unlock()
	id, secret, ok := r.BasicAuth()
	if r.Method != http.MethodPost || !ok || id != s.opts.ClientID || secret != s.opts.ClientSecret {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	if !bytes.Contains(body, []byte("grant_type=client_credentials")) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
		return
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tok := "tok-" + hex.EncodeToString(b)
	s.mu.Lock()
	s.tokens[tok] = true
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "token_type": "Bearer",
		"expires_in": int(s.opts.TokenLifetime / time.Second), "scope": "cob.write cob.read pix.write pix.read pix.send gn.pix.send.read"})
}

// hangIfAsked: after a commit, a PUT may be told to never answer.
func (s *Server) hangIfAsked(r *http.Request) bool {
	s.mu.Lock()
	h := s.hang > 0
	if h {
		s.hang--
	}
	s.mu.Unlock()
	if h {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	}
	return h
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

type cobBody struct {
	Calendario struct {
		Expiracao *int64 `json:"expiracao"`
	} `json:"calendario"`
	Devedor *struct {
		CPF  string `json:"cpf"`
		CNPJ string `json:"cnpj"`
		Nome string `json:"nome"`
	} `json:"devedor"`
	Valor struct {
		Original string `json:"original"`
	} `json:"valor"`
	Chave              string `json:"chave"`
	SolicitacaoPagador string `json:"solicitacaoPagador"`
}

func (s *Server) putCob(w http.ResponseWriter, r *http.Request, txid string, body []byte) {
	if !txidRe.MatchString(txid) {
		problem(w, http.StatusBadRequest, "CobOperacaoInvalida", "Cobrança inválida.", "txid inválido",
			Violacao{Razao: "O campo txid não respeita o schema.", Propriedade: "txid", Valor: txid})
		return
	}
	var b cobBody
	if err := decodeStrict(body, &b); err != nil {
		problem(w, http.StatusBadRequest, "CobOperacaoInvalida", "Cobrança inválida.", err.Error())
		return
	}
	var v []Violacao
	if b.Calendario.Expiracao == nil || *b.Calendario.Expiracao <= 0 {
		v = append(v, Violacao{Razao: "O campo cob.calendario.expiracao é igual ou menor que zero.", Propriedade: "cob.calendario.expiracao"})
	}
	if !valorRe.MatchString(b.Valor.Original) || b.Valor.Original == "0.00" {
		v = append(v, Violacao{Razao: "O campo cob.valor.original não respeita o _schema_.", Propriedade: "cob.valor.original",
			Valor: b.Valor.Original})
	}
	if b.Chave != s.opts.ReceivingKey {
		v = append(v, Violacao{Razao: "O campo cob.chave corresponde a uma conta que não pertence a este usuário recebedor.",
			Propriedade: "cob.chave", Valor: b.Chave})
	}
	if d := b.Devedor; d != nil && ((d.CPF == "") == (d.CNPJ == "") || d.Nome == "") {
		v = append(v, Violacao{Razao: "O objeto cob.devedor não respeita o _schema_.", Propriedade: "cob.devedor"})
	}
	if len(v) > 0 {
		problem(w, http.StatusBadRequest, "CobOperacaoInvalida", "Cobrança inválida.",
			"A requisição que busca alterar ou criar uma cobrança para pagamento imediato não respeita o _schema_ ou está semanticamente errada.", v...)
		return
	}
	s.mu.Lock()
	if _, dup := s.cobs[txid]; dup {
		s.mu.Unlock()
		problem(w, http.StatusConflict, "CobOperacaoInvalida", "Cobrança já existe.", "O txid "+txid+" já está em uso.")
		return
	}
	now := time.Now().UTC()
	c := &cobState{txid: txid, created: now, expiracao: *b.Calendario.Expiracao, valor: b.Valor.Original, chave: b.Chave,
		solic: b.SolicitacaoPagador, status: "ATIVA", visible: now.Add(s.opts.LookupLag)}
	if b.Devedor != nil {
		c.devedor, _ = json.Marshal(b.Devedor)
	}
	s.cobs[txid] = c
	out := s.cobJSON(c, false)
	s.mu.Unlock()
	if s.hangIfAsked(r) {
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) cobJSON(c *cobState, withPix bool) map[string]any {
	loc := "pixtest.example/qr/v2/" + c.txid
	m := map[string]any{
		"calendario":    map[string]any{"criacao": c.created.Format(time.RFC3339Nano), "expiracao": c.expiracao},
		"txid":          c.txid,
		"revisao":       0,
		"loc":           map[string]any{"id": 1, "location": loc, "tipoCob": "cob", "criacao": c.created.Format(time.RFC3339Nano)},
		"location":      loc,
		"status":        c.status,
		"valor":         map[string]any{"original": c.valor},
		"chave":         c.chave,
		"pixCopiaECola": "00020101021226830014BR.GOV.BCB.PIX2561" + loc + "5204000053039865802BR5913PIXTEST6008BRASILIA62070503***6304ABCD",
	}
	if c.solic != "" {
		m["solicitacaoPagador"] = c.solic
	}
	if c.devedor != nil {
		m["devedor"] = c.devedor
	}
	if withPix && c.e2e != "" {
		m["pix"] = []any{s.pixJSON(s.pix[c.e2e])}
	}
	return m
}

func (s *Server) pixJSON(p *pixState) map[string]any {
	m := map[string]any{"endToEndId": p.e2e, "valor": p.valor.StringFixed(2), "horario": p.horario.Format(time.RFC3339Nano)}
	if p.txid != "" {
		m["txid"] = p.txid
	}
	if len(p.devs) > 0 {
		var ds []any
		for _, d := range p.devs {
			ds = append(ds, devJSON(d))
		}
		m["devolucoes"] = ds
	}
	return m
}

func devJSON(d *devState) map[string]any {
	h := map[string]any{"solicitacao": d.requested.Format(time.RFC3339Nano)}
	if d.settled != nil {
		h["liquidacao"] = d.settled.Format(time.RFC3339Nano)
	}
	m := map[string]any{"id": d.id, "rtrId": d.rtr, "valor": d.valor.StringFixed(2), "horario": h, "status": d.status}
	if d.status == "NAO_REALIZADO" {
		m["motivo"] = "Devolução não realizada"
	}
	return m
}

func (s *Server) getCob(w http.ResponseWriter, txid string) {
	s.mu.Lock()
	c, ok := s.cobs[txid]
	if !ok || time.Now().Before(c.visible) {
		s.mu.Unlock()
		problem(w, http.StatusNotFound, "CobNaoEncontrado", "Cobrança não encontrada.", "Cobrança não encontrada para o txid informado.")
		return
	}
	out := s.cobJSON(c, true)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) putDevolucao(w http.ResponseWriter, r *http.Request, e2e, id string, body []byte) {
	var b struct {
		Valor     string `json:"valor"`
		Natureza  string `json:"natureza"`
		Descricao string `json:"descricao"`
	}
	if err := decodeStrict(body, &b); err != nil || !idRe.MatchString(id) {
		problem(w, http.StatusBadRequest, "PixDevolucaoInvalida", "Devolução inválida.", fmt.Sprint(err))
		return
	}
	if !valorRe.MatchString(b.Valor) || b.Valor == "0.00" {
		problem(w, http.StatusBadRequest, "PixDevolucaoInvalida", "Devolução inválida.",
			"A presente requisição de devolução não respeita o _schema_ ou não faz sentido semanticamente.",
			Violacao{Razao: "O campo devolucao.valor não respeita o _schema_.", Propriedade: "devolucao.valor", Valor: b.Valor})
		return
	}
	s.mu.Lock()
	p, ok := s.pix[e2e]
	if !ok {
		s.mu.Unlock()
		problem(w, http.StatusNotFound, "PixNaoEncontrado", "Pix não encontrado.", "Pix não encontrado para o e2eid informado.")
		return
	}
	sum := decimal.Zero
	for _, d := range p.devs {
		if d.id == id {
			s.mu.Unlock()
			problem(w, http.StatusBadRequest, "PixDevolucaoInvalida", "Devolução inválida.",
				"A presente requisição de devolução não respeita o _schema_ ou não faz sentido semanticamente.",
				Violacao{Razao: "A presente requisição de devolução apresenta um id já utilizado por outra requisição de devolução para o e2eid em questão.",
					Propriedade: "id", Valor: id})
			return
		}
		if d.status != "NAO_REALIZADO" {
			sum = sum.Add(d.valor)
		}
	}
	v := decimal.RequireFromString(b.Valor)
	if sum.Add(v).GreaterThan(p.valor) {
		s.mu.Unlock()
		problem(w, http.StatusBadRequest, "PixDevolucaoInvalida", "Devolução inválida.",
			"A presente requisição de devolução não respeita o _schema_ ou não faz sentido semanticamente.",
			Violacao{Razao: "A presente requisição de devolução, em conjunto com as demais prévias devoluções, excederia o valor do pix originário.",
				Propriedade: "devolucao.valor", Valor: b.Valor})
		return
	}
	now := time.Now().UTC()
	d := &devState{id: id, rtr: s.nextID("D", 32), valor: v, status: "EM_PROCESSAMENTO", requested: now,
		visible: now.Add(s.opts.LookupLag)}
	if s.opts.RefundsFinal {
		d.status, d.settled = "DEVOLVIDO", &now
	}
	p.devs = append(p.devs, d)
	out := devJSON(d)
	s.mu.Unlock()
	if s.hangIfAsked(r) {
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) getDevolucao(w http.ResponseWriter, e2e, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pix[e2e]; ok {
		for _, d := range p.devs {
			if d.id == id && !time.Now().Before(d.visible) {
				writeJSON(w, http.StatusOK, devJSON(d))
				return
			}
		}
	}
	problem(w, http.StatusNotFound, "PixDevolucaoNaoEncontrada", "Devolução não encontrada.",
		"Devolução não encontrada para o e2eid informado.")
}

// window reads inicio, fim and the paging parameters.
func window(w http.ResponseWriter, r *http.Request) (from, to time.Time, page, per int, ok bool) {
	q := r.URL.Query()
	var err1, err2 error
	from, err1 = time.Parse(time.RFC3339Nano, q.Get("inicio"))
	to, err2 = time.Parse(time.RFC3339Nano, q.Get("fim"))
	page, per = 0, 100
	if v := q.Get("paginacao.paginaAtual"); v != "" {
		page, _ = strconv.Atoi(v)
	}
	if v := q.Get("paginacao.itensPorPagina"); v != "" {
		per, _ = strconv.Atoi(v)
	}
	if err1 != nil || err2 != nil || to.Before(from) || page < 0 || per < 1 || per > 1000 {
		problem(w, http.StatusBadRequest, "PixConsultaInvalida", "Consulta inválida.",
			"Os parâmetros de consulta não respeitam o schema.")
		return from, to, page, per, false
	}
	return from, to, page, per, true
}

func paginate[T any](items []T, page, per int) ([]T, map[string]any) {
	pages := (len(items) + per - 1) / per
	if pages == 0 {
		pages = 1
	}
	lo, hi := page*per, page*per+per
	if lo > len(items) {
		lo = len(items)
	}
	if hi > len(items) {
		hi = len(items)
	}
	return items[lo:hi], map[string]any{"paginaAtual": page, "itensPorPagina": per, "quantidadeDePaginas": pages,
		"quantidadeTotalDeItens": len(items)}
}

func (s *Server) listPix(w http.ResponseWriter, r *http.Request) {
	from, to, page, per, ok := window(w, r)
	if !ok {
		return
	}
	withDevs := r.URL.Query().Get("devolucaoPresente") == "true"
	s.mu.Lock()
	var ps []*pixState
	for _, p := range s.pix {
		if p.horario.Before(from) || p.horario.After(to) || (withDevs && len(p.devs) == 0) {
			continue
		}
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		return ps[i].horario.Before(ps[j].horario) || (ps[i].horario.Equal(ps[j].horario) && ps[i].e2e < ps[j].e2e)
	})
	pg, pag := paginate(ps, page, per)
	items := make([]any, 0, len(pg))
	for _, p := range pg {
		items = append(items, s.pixJSON(p))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"parametros": map[string]any{"inicio": r.URL.Query().Get("inicio"),
		"fim": r.URL.Query().Get("fim"), "paginacao": pag}, "pix": items})
}

type sendBody struct {
	Valor   string `json:"valor"`
	Pagador struct {
		Chave       string `json:"chave"`
		InfoPagador string `json:"infoPagador"`
	} `json:"pagador"`
	Favorecido struct {
		Chave      string `json:"chave"`
		CPF        string `json:"cpf"`
		CNPJ       string `json:"cnpj"`
		ContaBanco *struct {
			Nome        string `json:"nome"`
			CPF         string `json:"cpf"`
			CNPJ        string `json:"cnpj"`
			CodigoBanco string `json:"codigoBanco"`
			Agencia     string `json:"agencia"`
			Conta       string `json:"conta"`
			TipoConta   string `json:"tipoConta"`
		} `json:"contaBanco"`
	} `json:"favorecido"`
}

func (s *Server) putSend(w http.ResponseWriter, r *http.Request, id string, body []byte) {
	var b sendBody
	if err := decodeStrict(body, &b); err != nil {
		efiError(w, http.StatusBadRequest, "json_invalido", err.Error())
		return
	}
	if !idRe.MatchString(id) {
		efiError(w, http.StatusBadRequest, "valor_invalido", "idEnvio inválido")
		return
	}
	if !valorRe.MatchString(b.Valor) || b.Valor == "0.00" {
		problem(w, http.StatusBadRequest, "PixEnvioInvalido", "Envio inválido.", "O envio não respeita o schema.",
			Violacao{Razao: "O campo valor não respeita o _schema_.", Propriedade: "valor", Valor: b.Valor})
		return
	}
	if b.Pagador.Chave != s.opts.ReceivingKey {
		efiError(w, http.StatusBadRequest, "chave_invalida", "A chave informada não faz referência à conta autenticada")
		return
	}
	f := b.Favorecido
	if (f.Chave == "") == (f.ContaBanco == nil) {
		problem(w, http.StatusBadRequest, "PixEnvioInvalido", "Envio inválido.", "O favorecido não respeita o schema.",
			Violacao{Razao: "Informe favorecido.chave ou favorecido.contaBanco.", Propriedade: "favorecido"})
		return
	}
	if cb := f.ContaBanco; cb != nil && (cb.Nome == "" || (cb.CPF == "") == (cb.CNPJ == "") || len(cb.CodigoBanco) != 8 ||
		cb.Agencia == "" || cb.Conta == "" || cb.TipoConta == "") {
		problem(w, http.StatusBadRequest, "PixEnvioInvalido", "Envio inválido.", "O favorecido não respeita o schema.",
			Violacao{Razao: "O objeto favorecido.contaBanco não respeita o _schema_.", Propriedade: "favorecido.contaBanco"})
		return
	}
	s.mu.Lock()
	if _, dup := s.sends[id]; dup {
		s.mu.Unlock()
		efiError(w, http.StatusConflict, "id_envio_duplicado", "O id de envio informado já foi utilizado em outro pagamento")
		return
	}
	v := decimal.RequireFromString(b.Valor)
	if v.GreaterThan(s.balance) {
		s.mu.Unlock()
		problem(w, http.StatusUnprocessableEntity, "SaldoInsuficiente", "Saldo insuficiente.",
			"O saldo da conta é insuficiente para realizar o envio.")
		return
	}
	s.balance = s.balance.Sub(v)
	now := time.Now().UTC()
	fav, _ := json.Marshal(f)
	sd := &sendState{id: id, e2e: s.nextID("E", 32), valor: b.Valor, chave: b.Pagador.Chave, favorecido: fav,
		status: "EM_PROCESSAMENTO", requested: now, visible: now.Add(s.opts.LookupLag), info: b.Pagador.InfoPagador}
	if s.opts.SendsFinal {
		sd.status, sd.settled = "REALIZADO", &now
	}
	s.sends[id] = sd
	out := map[string]any{"idEnvio": id, "e2eId": sd.e2e, "valor": sd.valor,
		"horario": map[string]any{"solicitacao": now.Format(time.RFC3339Nano)}, "status": sd.status}
	s.mu.Unlock()
	if s.hangIfAsked(r) {
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func sendJSON(sd *sendState) map[string]any {
	h := map[string]any{"solicitacao": sd.requested.Format(time.RFC3339Nano)}
	if sd.settled != nil {
		h["liquidacao"] = sd.settled.Format(time.RFC3339Nano)
	}
	var fav map[string]any
	_ = json.Unmarshal(sd.favorecido, &fav)
	for k, v := range fav {
		if v == "" || v == nil {
			delete(fav, k)
		}
	}
	m := map[string]any{"endToEndId": sd.e2e, "idEnvio": sd.id, "valor": sd.valor, "chave": sd.chave, "status": sd.status,
		"horario": h, "favorecido": fav}
	if sd.info != "" {
		m["infoPagador"] = sd.info
	}
	return m
}

func (s *Server) getSend(w http.ResponseWriter, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sd, ok := s.sends[id]
	if !ok || time.Now().Before(sd.visible) {
		problem(w, http.StatusNotFound, "PixEnviadoNaoEncontrado", "Não Encontrado", "Pix enviado não encontrado para o idEnvio informado.")
		return
	}
	writeJSON(w, http.StatusOK, sendJSON(sd))
}

func (s *Server) listSends(w http.ResponseWriter, r *http.Request) {
	from, to, page, per, ok := window(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	var ss []*sendState
	for _, sd := range s.sends {
		if sd.requested.Before(from) || sd.requested.After(to) {
			continue
		}
		ss = append(ss, sd)
	}
	sort.Slice(ss, func(i, j int) bool {
		return ss[i].requested.Before(ss[j].requested) || (ss[i].requested.Equal(ss[j].requested) && ss[i].id < ss[j].id)
	})
	pg, pag := paginate(ss, page, per)
	items := make([]any, 0, len(pg))
	for _, sd := range pg {
		items = append(items, sendJSON(sd))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"parametros": map[string]any{"inicio": r.URL.Query().Get("inicio"),
		"fim": r.URL.Query().Get("fim"), "paginacao": pag}, "pix": items})
}
