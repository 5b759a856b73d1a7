package sim

import (
	"fmt"
	"strings"
)

// brCode builds a dynamic Pix BR Code ("copia e cola") in the EMV QRCPS
// format the BCB manual describes: payload format, point of initiation 12
// (single use), merchant account info with GUI br.gov.bcb.pix and the cob
// location URL, MCC, currency 986 (BRL), amount, country, merchant name and
// city, additional data (txid "***" for dynamic codes) and CRC16-CCITT.
func brCode(location, amount string) string {
	var b strings.Builder
	field := func(id, v string) { fmt.Fprintf(&b, "%s%02d%s", id, len(v), v) }
	mai := emv("00", "br.gov.bcb.pix") + emv("25", location)
	field("00", "01")
	field("01", "12")
	field("26", mai)
	field("52", "0000")
	field("53", "986")
	field("54", amount)
	field("58", "BR")
	field("59", "SALDO SIM PSP")
	field("60", "SAO PAULO")
	field("62", emv("05", "***"))
	b.WriteString("6304")
	return b.String() + fmt.Sprintf("%04X", crc16CCITT([]byte(b.String())))
}

func emv(id, v string) string { return fmt.Sprintf("%s%02d%s", id, len(v), v) }

// crc16CCITT is CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF), the BR Code CRC.
func crc16CCITT(data []byte) uint16 {
	crc := uint16(0xFFFF)
	for _, c := range data {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
