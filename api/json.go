package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
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

// decode reads a strict JSON body into v: application/json, one value,
// no unknown fields, within the size limit. An idempotent route has read the
// body already and left it in r.Body; reading again is cheap.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
				title: "Unsupported media type", detail: "send application/json"}
		}
	}
	b, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return badRequest("a JSON body is required")
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
