package pix

// This file is everything PSP-specific: sending Pix is not part of the BCB
// standard, so each PSP exposes its own endpoint. Efí's shape (which others
// follow closely) is implemented here; a second PSP is one more SendAPI.

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/saldo/saldo/providers"
)

// SendAPI is a PSP's send endpoint: how a send is written, read, listed and
// recognised in a webhook. Paths are relative to Config.SendBaseURL.
type SendAPI interface {
	// Name of the shape, for logs ("efi").
	Name() string
	// EncodeSend returns the body of the PUT that sends in from payerKey.
	EncodeSend(in providers.OperationInput, payerKey string) ([]byte, error)
	// SendPath is the path of the PUT that makes the send idEnvio;
	// LookupPath that of the GET that reads it; ListPath that of the list
	// (queried with inicio, fim and the paginacao parameters).
	SendPath(idEnvio string) string
	LookupPath(idEnvio string) string
	ListPath() string
	// ParseSend reads one send (the PUT's answer or the GET's).
	ParseSend(body []byte) (Send, error)
	// ParseSendList reads one page of the list and its paging.
	ParseSendList(body []byte) ([]Send, Page, error)
	// WebhookSend recognises a send in one item of a webhook's pix array.
	WebhookSend(item []byte) (Send, bool)
	// SendNotFound reports whether a 404 problem's code (its type's last
	// segment, else its nome) is this PSP's answer for "no send with this
	// idEnvio". Any other 404 (a gateway's, an unmapped route's) proves
	// nothing (R16): a send failed on it may be sent again under a new id.
	SendNotFound(code string) bool
}

// Send is a Pix send as saldo reads it, whatever the PSP.
type Send struct {
	IDEnvio    string
	EndToEndID string
	Valor      string
	Status     string
	State      providers.State
	// Operation: bank_payout when the send named a bank account,
	// pix_transfer when it named a key, "" when the answer does not say.
	// Informational only: a pix_transfer may name a bank account too, so
	// saldo never checks an attempt's operation against it.
	Operation   providers.Operation
	Solicitacao time.Time
	Liquidacao  time.Time
	Motivo      string
}

// Page is the paging of a list answer (paginacao).
type Page struct {
	Atual   int
	Paginas int
}

// Efí's send statuses.
const (
	EnvioEmProcessamento = "EM_PROCESSAMENTO"
	EnvioRealizado       = "REALIZADO"
	EnvioNaoRealizado    = "NAO_REALIZADO"
)

// Efi is Efí's send API: PUT /v2/gn/pix/{idEnvio},
// GET /v2/gn/pix/enviados/id-envio/{idEnvio}, GET /v2/gn/pix/enviados.
type Efi struct{}

var _ SendAPI = Efi{}

// Name is "efi".
func (Efi) Name() string { return "efi" }

// SendNotFound: Efí answers a GET of an unknown idEnvio 404
// PixEnviadoNaoEncontrado.
func (Efi) SendNotFound(code string) bool { return code == "PixEnviadoNaoEncontrado" }

// SendPath is /v2/gn/pix/{idEnvio}.
func (Efi) SendPath(id string) string { return "/v2/gn/pix/" + id }

// LookupPath is /v2/gn/pix/enviados/id-envio/{idEnvio}.
func (Efi) LookupPath(id string) string { return "/v2/gn/pix/enviados/id-envio/" + id }

// ListPath is /v2/gn/pix/enviados.
func (Efi) ListPath() string { return "/v2/gn/pix/enviados" }

type efiSend struct {
	Valor      string        `json:"valor"`
	Pagador    efiPagador    `json:"pagador"`
	Favorecido efiFavorecido `json:"favorecido"`
}

type efiPagador struct {
	Chave       string `json:"chave"`
	InfoPagador string `json:"infoPagador,omitempty"`
}

// efiFavorecido names a key (with the holder's CPF/CNPJ when known, which
// Efí checks against the key's owner) or a bank account.
type efiFavorecido struct {
	Chave      string         `json:"chave,omitempty"`
	CPF        string         `json:"cpf,omitempty"`
	CNPJ       string         `json:"cnpj,omitempty"`
	ContaBanco *efiContaBanco `json:"contaBanco,omitempty"`
}

type efiContaBanco struct {
	Nome        string `json:"nome"`
	CPF         string `json:"cpf,omitempty"`
	CNPJ        string `json:"cnpj,omitempty"`
	CodigoBanco string `json:"codigoBanco"`
	Agencia     string `json:"agencia"`
	Conta       string `json:"conta"`
	TipoConta   string `json:"tipoConta"`
}

// efiTipoConta maps saldo's account types to the ISO 20022 codes Efí takes.
var efiTipoConta = map[string]string{"checking": "cacc", "savings": "svgs", "payment": "tran", "salary": "slry"}

// EncodeSend writes Efí's body: valor, pagador.chave (+ infoPagador from
// the description), favorecido.chave or favorecido.contaBanco.
func (Efi) EncodeSend(in providers.OperationInput, payerKey string) ([]byte, error) {
	v, err := valor(in.Amount, in.Currency)
	if err != nil {
		return nil, err
	}
	if err := text("description", in.Description, 140); err != nil {
		return nil, err
	}
	d := in.Destination
	if d == nil || (d.PixKey == nil) == (d.BankAccount == nil) {
		return nil, fmt.Errorf("destination needs exactly one of pix_key and bank_account")
	}
	if in.Operation == providers.OpBankPayout && d.BankAccount == nil {
		return nil, fmt.Errorf("bank_payout needs a bank_account")
	}
	cpf, cnpj, err := taxID(d.HolderTaxID)
	if err != nil {
		return nil, err
	}
	body := efiSend{Valor: v, Pagador: efiPagador{Chave: payerKey, InfoPagador: in.Description}}
	if k := d.PixKey; k != nil {
		if k.Value == "" || len(k.Value) > 77 {
			return nil, fmt.Errorf("destination.pix_key.value must be 1-77 characters")
		}
		body.Favorecido = efiFavorecido{Chave: k.Value, CPF: cpf, CNPJ: cnpj}
	} else {
		a := d.BankAccount
		tipo, ok := efiTipoConta[a.Type]
		switch {
		case !ok:
			return nil, fmt.Errorf("destination.bank_account.type must be checking, savings, payment or salary")
		case len(a.ISPB) != 8 || !digitsRe.MatchString(a.ISPB):
			return nil, fmt.Errorf("destination.bank_account.ispb must be 8 digits")
		case a.Branch == "" || !digitsRe.MatchString(a.Branch):
			return nil, fmt.Errorf("destination.bank_account.branch must be digits")
		case d.HolderName == "" || (cpf == "" && cnpj == ""):
			return nil, fmt.Errorf("a send to a bank account needs the holder's name and CPF or CNPJ")
		}
		conta := strings.ReplaceAll(a.Account, "-", "")
		if conta == "" || !digitsRe.MatchString(conta) {
			return nil, fmt.Errorf("destination.bank_account.account must be digits (a dash allowed)")
		}
		if err := text("destination.holder_name", d.HolderName, 200); err != nil {
			return nil, err
		}
		body.Favorecido = efiFavorecido{ContaBanco: &efiContaBanco{Nome: d.HolderName, CPF: cpf, CNPJ: cnpj,
			CodigoBanco: a.ISPB, Agencia: a.Branch, Conta: conta, TipoConta: tipo}}
	}
	return json.Marshal(body)
}

// taxID splits a CPF (11 digits) or CNPJ (14) into the field it goes in.
func taxID(s string) (cpf, cnpj string, err error) {
	switch {
	case s == "":
		return "", "", nil
	case len(s) == 11 && digitsRe.MatchString(s):
		return s, "", nil
	case len(s) == 14:
		return "", s, nil
	}
	return "", "", fmt.Errorf("tax id must be a CPF (11 digits) or a CNPJ (14 characters)")
}

// efiSendAnswer covers the PUT's answer (e2eId), the GET's and the list's
// (endToEndId) and a webhook item (horario as one timestamp, gnExtras).
type efiSendAnswer struct {
	IDEnvio    string          `json:"idEnvio"`
	E2EID      string          `json:"e2eId"`
	EndToEndID string          `json:"endToEndId"`
	Valor      string          `json:"valor"`
	Status     string          `json:"status"`
	Tipo       string          `json:"tipo"`
	Horario    json.RawMessage `json:"horario"`
	Favorecido *struct {
		Chave      string          `json:"chave"`
		ContaBanco json.RawMessage `json:"contaBanco"`
	} `json:"favorecido"`
	GnExtras *struct {
		IDEnvio string `json:"idEnvio"`
	} `json:"gnExtras"`
	Motivo string `json:"motivo"`
}

func (a efiSendAnswer) send() Send {
	s := Send{IDEnvio: a.IDEnvio, EndToEndID: a.EndToEndID, Valor: a.Valor, Status: a.Status, Motivo: a.Motivo}
	if s.EndToEndID == "" {
		s.EndToEndID = a.E2EID
	}
	if s.IDEnvio == "" && a.GnExtras != nil {
		s.IDEnvio = a.GnExtras.IDEnvio
	}
	switch a.Status {
	case EnvioEmProcessamento:
		s.State = providers.StateProcessing
	case EnvioRealizado:
		s.State = providers.StateSucceeded
	case EnvioNaoRealizado:
		s.State = providers.StateFailed
	}
	if f := a.Favorecido; f != nil {
		if len(f.ContaBanco) > 0 && string(f.ContaBanco) != "null" {
			s.Operation = providers.OpBankPayout
		} else if f.Chave != "" {
			s.Operation = providers.OpPixTransfer
		}
	}
	var h struct {
		Solicitacao time.Time `json:"solicitacao"`
		Liquidacao  time.Time `json:"liquidacao"`
	}
	var at time.Time
	if json.Unmarshal(a.Horario, &h) == nil {
		s.Solicitacao, s.Liquidacao = h.Solicitacao, h.Liquidacao
	} else if json.Unmarshal(a.Horario, &at) == nil {
		s.Liquidacao = at
	}
	return s
}

// ParseSend reads {idEnvio, e2eId|endToEndId, valor, horario, status}.
func (Efi) ParseSend(body []byte) (Send, error) {
	var a efiSendAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return Send{}, err
	}
	return a.send(), nil
}

// ParseSendList reads {"parametros": {"paginacao": ...}, "pix": [...]}.
func (Efi) ParseSendList(body []byte) ([]Send, Page, error) {
	var l struct {
		Parametros struct {
			Paginacao paginacao `json:"paginacao"`
		} `json:"parametros"`
		Pix []efiSendAnswer `json:"pix"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, Page{}, err
	}
	out := make([]Send, 0, len(l.Pix))
	for _, a := range l.Pix {
		out = append(out, a.send())
	}
	return out, Page{Atual: l.Parametros.Paginacao.PaginaAtual, Paginas: l.Parametros.Paginacao.QuantidadeDePaginas}, nil
}

// WebhookSend recognises Efí's notice of a send: an item of the pix array
// with gnExtras.idEnvio (or idEnvio) and, usually, tipo SOLICITACAO.
func (Efi) WebhookSend(item []byte) (Send, bool) {
	var a efiSendAnswer
	if json.Unmarshal(item, &a) != nil {
		return Send{}, false
	}
	s := a.send()
	if s.IDEnvio == "" {
		return Send{}, false
	}
	return s, true
}
