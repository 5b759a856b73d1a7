package pix

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// The shapes of the BCB API Pix (openapi.yaml of github.com/bacen/pix-api,
// v2.9): only the fields saldo writes or reads.

// Cob statuses (CobrancaStatus). The description's prose spells the
// removed ones REMOVIDO_..., its enum REMOVIDA_...: both are read.
const (
	CobAtiva             = "ATIVA"
	CobConcluida         = "CONCLUIDA"
	CobRemovidaRecebedor = "REMOVIDA_PELO_USUARIO_RECEBEDOR"
	CobRemovidaPSP       = "REMOVIDA_PELO_PSP"
)

// Devolucao statuses.
const (
	DevolucaoEmProcessamento = "EM_PROCESSAMENTO"
	DevolucaoDevolvido       = "DEVOLVIDO"
	DevolucaoNaoRealizado    = "NAO_REALIZADO"
)

// Failure codes this adapter reports.
const (
	FailureCobExpired   = "cob_expired" // charges reads it as "expired"
	FailureCobRemoved   = "cob_removed"
	FailureNaoRealizado = "nao_realizado"
)

var (
	txidRe = regexp.MustCompile(`^[a-zA-Z0-9]{26,35}$`)
	idRe   = regexp.MustCompile(`^[a-zA-Z0-9]{1,35}$`)
	// An endToEndId: E, the payer PSP's ISPB (8 digits), yyyyMMddHHmm, 11
	// letters or digits (32 in all; the schema says only [a-zA-Z0-9]{32}).
	e2eRe = regexp.MustCompile(`^[Ee][0-9]{20}[a-zA-Z0-9]{11}$`)
	// An rtrId (the id of a devolucao in the SPI): the same shape as an
	// endToEndId, beginning with D.
	rtrRe    = regexp.MustCompile(`^[Dd][0-9]{20}[a-zA-Z0-9]{11}$`)
	digitsRe = regexp.MustCompile(`^[0-9]+$`)
)

// cobRequest is the body of PUT /cob/{txid} (CobSolicitada).
type cobRequest struct {
	Calendario         cobCalendario `json:"calendario"`
	Devedor            *pessoa       `json:"devedor,omitempty"`
	Valor              cobValor      `json:"valor"`
	Chave              string        `json:"chave"`
	SolicitacaoPagador string        `json:"solicitacaoPagador,omitempty"`
}

type cobCalendario struct {
	Criacao   *time.Time `json:"criacao,omitempty"`
	Expiracao int64      `json:"expiracao"`
}

type cobValor struct {
	Original string `json:"original"`
}

type pessoa struct {
	CPF  string `json:"cpf,omitempty"`
	CNPJ string `json:"cnpj,omitempty"`
	Nome string `json:"nome"`
}

// DefaultCobExpiracao is calendario.expiracao when a cob leaves it out:
// the BCB description's "default: 86400" (a cob lives 24 h).
const DefaultCobExpiracao = 86400

// cobCalendarioAnswer is calendario as the API answers it: expiracao is
// optional (DefaultCobExpiracao when absent), never read as 0.
type cobCalendarioAnswer struct {
	Criacao   *time.Time `json:"criacao,omitempty"`
	Expiracao *int64     `json:"expiracao,omitempty"`
}

// cob is a cob as the API answers it (CobGerada, CobCompleta).
type cob struct {
	Calendario    cobCalendarioAnswer `json:"calendario"`
	TxID          string              `json:"txid"`
	Revisao       int                 `json:"revisao"`
	Location      string              `json:"location"`
	Status        string              `json:"status"`
	Valor         cobValor            `json:"valor"`
	Chave         string              `json:"chave"`
	PixCopiaECola string              `json:"pixCopiaECola"`
	Pix           []pixRecebido       `json:"pix"`
}

// pixRecebido is a received Pix (schema Pix).
type pixRecebido struct {
	EndToEndID string     `json:"endToEndId"`
	TxID       string     `json:"txid,omitempty"`
	Valor      string     `json:"valor"`
	Chave      string     `json:"chave,omitempty"`
	Horario    time.Time  `json:"horario"`
	Devolucoes devolucoes `json:"devolucoes,omitempty"`
}

// devolucoes reads an array, and also a single object (the description's
// own webhook example, pixWebhook1, has one).
type devolucoes []devolucao

func (d *devolucoes) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var one devolucao
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*d = devolucoes{one}
		return nil
	}
	var many []devolucao
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*d = many
	return nil
}

// devolucaoRequest is the body of PUT /pix/{e2eid}/devolucao/{id}.
type devolucaoRequest struct {
	Valor     string `json:"valor"`
	Natureza  string `json:"natureza,omitempty"`
	Descricao string `json:"descricao,omitempty"`
}

// devolucao as the API answers it.
type devolucao struct {
	ID      string `json:"id"`
	RtrID   string `json:"rtrId"`
	Valor   string `json:"valor"`
	Horario struct {
		Solicitacao *time.Time `json:"solicitacao,omitempty"`
		Liquidacao  *time.Time `json:"liquidacao,omitempty"`
	} `json:"horario"`
	Status string `json:"status"`
	Motivo string `json:"motivo,omitempty"`
}

// paginacao of list answers (parametros.paginacao).
type paginacao struct {
	PaginaAtual            int `json:"paginaAtual"`
	ItensPorPagina         int `json:"itensPorPagina"`
	QuantidadeDePaginas    int `json:"quantidadeDePaginas"`
	QuantidadeTotalDeItens int `json:"quantidadeTotalDeItens"`
}

// pixList is GET /pix (PixConsultados).
type pixList struct {
	Parametros struct {
		Paginacao paginacao `json:"paginacao"`
	} `json:"parametros"`
	Pix []pixRecebido `json:"pix"`
}

// problem is an application/problem+json error (Problema), plus the
// {nome, mensagem} errors some PSPs (Efí) answer on their own endpoints.
type problem struct {
	Type      string     `json:"type"`
	Title     string     `json:"title"`
	Status    int        `json:"status"`
	Detail    string     `json:"detail"`
	Violacoes []violacao `json:"violacoes"`
	Nome      string     `json:"nome"`
	Mensagem  string     `json:"mensagem"`
}

type violacao struct {
	Razao       string `json:"razao"`
	Propriedade string `json:"propriedade"`
	Valor       string `json:"valor"`
}

func parseProblem(b []byte) (problem, bool) {
	var p problem
	if len(b) == 0 || json.Unmarshal(b, &p) != nil {
		return problem{}, false
	}
	return p, p.Type != "" || p.Title != "" || p.Nome != "" || len(p.Violacoes) > 0
}

// code is the problem's short code: the last segment of type
// (".../error/CobOperacaoInvalida"), else the PSP's nome.
func (p problem) code() string {
	if p.Type != "" {
		t := strings.TrimRight(p.Type, "/")
		return t[strings.LastIndex(t, "/")+1:]
	}
	return p.Nome
}

// reason names the violated fields first ("cob.valor.original: ...").
func (p problem) reason() string {
	var parts []string
	for _, v := range p.Violacoes {
		switch {
		case v.Propriedade != "" && v.Razao != "":
			parts = append(parts, v.Propriedade+": "+v.Razao)
		case v.Propriedade != "":
			parts = append(parts, v.Propriedade)
		case v.Razao != "":
			parts = append(parts, v.Razao)
		}
	}
	head := p.Detail
	if head == "" {
		head = p.Title
	}
	if head == "" {
		head = p.Mensagem
	}
	if len(parts) == 0 {
		return head
	}
	if head == "" {
		return strings.Join(parts, "; ")
	}
	return strings.Join(parts, "; ") + " (" + head + ")"
}

// duplicatePhrases say "this id is already taken" in the ways PSPs word
// it. The BCB description answers a repeated devolucao id with a 400 whose
// violation reads "apresenta um {id} já utilizado"; a cob that exists and
// is no longer ATIVA with "A cobrança já existe"; Efí with
// "id_envio_duplicado" on a 409.
var duplicatePhrases = []string{"ja utilizado", "ja foi utilizado", "ja existe", "em uso", "duplicad",
	"already exists", "already used", "duplicate"}

// duplicate reports whether a 4xx problem says our id is already taken:
// that is "query it", never "failed" (a new id would pay twice).
func (p problem) duplicate() bool {
	texts := []string{p.Nome, p.Mensagem, p.Detail, p.Title, p.code()}
	for _, v := range p.Violacoes {
		texts = append(texts, v.Razao)
	}
	for _, t := range texts {
		t = fold(t)
		for _, ph := range duplicatePhrases {
			if strings.Contains(t, ph) {
				return true
			}
		}
	}
	return false
}

// fold lowercases, strips Portuguese accents ("já" -> "ja") and turns
// underscores into spaces.
func fold(s string) string { return accents.Replace(strings.ToLower(s)) }

var accents = strings.NewReplacer("á", "a", "à", "a", "â", "a", "ã", "a", "é", "e", "ê", "e", "í", "i",
	"ó", "o", "ô", "o", "õ", "o", "ú", "u", "ü", "u", "ç", "c", "_", " ")

// valor formats an amount as the API wants it (\d{1,10}\.\d{2}): BRL, at
// most two decimals, positive, at most ten integer digits.
func valor(amount, currency string) (string, error) {
	if currency != "BRL" {
		return "", fmt.Errorf("Pix moves BRL only, got %q", currency)
	}
	d, err := decimal.NewFromString(amount)
	if err != nil {
		return "", fmt.Errorf("amount %q: %v", amount, err)
	}
	if !d.IsPositive() {
		return "", fmt.Errorf("amount must be greater than zero, got %q", amount)
	}
	if !d.Equal(d.Round(2)) {
		return "", fmt.Errorf("BRL takes at most 2 decimal places, got %q", amount)
	}
	s := d.StringFixed(2)
	if len(s) > 13 {
		return "", fmt.Errorf("amount %q exceeds the API's 10 integer digits", amount)
	}
	return s, nil
}

// text refuses a free text longer than n characters (not bytes).
func text(field, s string, n int) error {
	if utf8.RuneCountInString(s) > n {
		return fmt.Errorf("%s is limited to %d characters", field, n)
	}
	return nil
}
