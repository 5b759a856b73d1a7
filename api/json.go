package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"code":"internal"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// readBody reads the whole body under the size limit: 413 past it.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: "body_too_large", title: "Body too large",
			detail: fmt.Sprintf("request bodies are limited to %d bytes", s.cfg.MaxBodyBytes)}
	}
	if err != nil {
		return nil, badRequest("could not read the request body")
	}
	return b, nil
}

// decode reads a strict JSON body into v: application/json (a body without
// a Content-Type is 415), one value, within the size limit, and at every
// object level only the exact field names v declares, each at most once:
// encoding/json alone would match "AMOUNT" to amount and let the last of two
// "amount" keys win, so a gateway reading the first key could disagree with
// saldo about how much is paid. Strings may not hold NUL (PostgreSQL refuses
// it). An idempotent route has read the body already and left it in r.Body;
// reading again is cheap.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkContentType(r, b); err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return badRequest("a JSON body is required")
	}
	return decodeStrict(b, v)
}

// decodeOptional is decode for a route whose body may be absent: it reads
// the body whatever ContentLength says (a chunked body has none) and decodes
// it only when it holds something. It reports whether it did.
func (s *Server) decodeOptional(w http.ResponseWriter, r *http.Request, v any) (bool, error) {
	b, err := s.readBody(w, r)
	if err != nil {
		return false, err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return false, nil
	}
	if err := checkContentType(r, b); err != nil {
		return false, err
	}
	return true, decodeStrict(b, v)
}

// checkContentType: a body must say it is application/json.
func checkContentType(r *http.Request, body []byte) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if len(body) == 0 {
			return nil
		}
		return errUnsupportedMediaType
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return errUnsupportedMediaType
	}
	return nil
}

// decodeStrict checks b against v's shape (checkKeys) and decodes it.
func decodeStrict(b []byte, v any) error {
	if err := checkKeys(b, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("the body must hold exactly one JSON value")
	}
	return nil
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// checkKeys walks the JSON in b token by token beside the Go type t it will
// be decoded into. It refuses, naming the field: an object key that is not
// exactly one of the struct's JSON field names (case matters), a key that
// appears twice in one object (structs and maps alike), and a string or key
// holding NUL. Syntax errors are left to the decoder's messages.
func checkKeys(b []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	err := checkValue(dec, "", t, 0)
	var ae *apiError
	if err != nil && !errors.As(err, &ae) {
		return jsonError(err)
	}
	return err
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// maxJSONDepth is how deeply a request body's arrays and objects may nest.
// saldo's bodies nest three or four levels (metadata, evidence); a client's
// 50,000 nested brackets in a 50 KB body kept a CPU busy for minutes (the
// walk copies the field path at every level) before this bound.
const maxJSONDepth = 64

func checkValue(dec *json.Decoder, path string, t reflect.Type, depth int) error {
	// JSON null is a value only inside free-form JSON (evidence, metadata
	// of a report): elsewhere encoding/json would read it as the field's
	// zero value or as absent (a pointer), which docs/openapi.yaml forbids
	// and which could turn a client's missing value into a default (a
	// refund's null amount into a full refund).
	nullable := t == nil || t.Kind() == reflect.Interface || t == rawMessageType
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType || (t != nil && t.Kind() == reflect.Interface) {
		t = nil // any JSON: still no duplicate keys, no NUL
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok := tok.(type) {
	case nil:
		if !nullable {
			return invalidField(path, fmt.Sprintf("%s must not be null: leave it out instead", orBody(path)))
		}
		return nil
	case string:
		if strings.IndexByte(tok, 0) >= 0 {
			return invalidField(path, fmt.Sprintf("%s must not contain NUL (\\u0000)", orBody(path)))
		}
		return nil
	case json.Delim:
		if depth >= maxJSONDepth {
			return invalidField(path, fmt.Sprintf("%s nests arrays and objects deeper than %d levels", orBody(path), maxJSONDepth))
		}
		switch tok {
		case '{':
			var fields map[string]reflect.Type
			var elem reflect.Type
			if t != nil {
				switch t.Kind() {
				case reflect.Struct:
					fields = jsonFields(t)
				case reflect.Map:
					elem = t.Elem()
				default:
					t = nil // a type error the decoder will name
				}
			}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := kt.(string)
				field := join(path, key)
				if strings.IndexByte(key, 0) >= 0 {
					return invalidField(path, "object keys must not contain NUL (\\u0000)")
				}
				if seen[key] {
					return invalidField(field, fmt.Sprintf("key %q appears twice", key))
				}
				seen[key] = true
				var ft reflect.Type
				if fields != nil {
					var ok bool
					if ft, ok = fields[key]; !ok {
						return invalidField(field, fmt.Sprintf("unknown field %q (field names are case-sensitive)", key))
					}
				} else {
					ft = elem
				}
				if err := checkValue(dec, field, ft, depth+1); err != nil {
					return err
				}
			}
			_, err := dec.Token() // '}'
			return err
		case '[':
			var elem reflect.Type
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
				elem = t.Elem()
			}
			for i := 0; dec.More(); i++ {
				if err := checkValue(dec, fmt.Sprintf("%s[%d]", path, i), elem, depth+1); err != nil {
					return err
				}
			}
			_, err := dec.Token() // ']'
			return err
		}
	}
	return nil
}

// jsonFields maps a struct's JSON field names (tags, or Go names without
// one; embedded structs flattened) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// jsonError turns a decoding error into a problem naming the field.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		return invalidField(field, fmt.Sprintf("%s must be a JSON %s", orBody(field), jsonKind(te.Type.Kind().String())))
	case errors.As(err, &se):
		return badRequest(fmt.Sprintf("malformed JSON at byte %d", se.Offset))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return invalidField(name, fmt.Sprintf("unknown field %q", name))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("truncated JSON")
	}
	return badRequest("malformed JSON: " + err.Error())
}

func orBody(f string) string {
	if f == "" {
		return "the body"
	}
	return f
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "string"
	case "map", "struct":
		return "object"
	case "slice", "array":
		return "array"
	case "bool":
		return "boolean"
	}
	return "number"
}
