package crdt

import (
	"bytes"
	"errors"
	"io"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// PodDecoder decodes pod values with the result of DecodeValue, several
// times faster, for bulk readers (the daemon's enforce view at start-up
// decodes a million of them). It reads the common encoding, a map of the
// PodValue fields as EncodeValue writes it, with msgpack's own Decoder
// primitives and no reflection; any other form (array-encoded structs,
// nil fields, unexpected types, a key given twice, an error) is decoded
// by DecodeValue itself, so results and errors are DecodeValue's.
//
// Decode reuses the map and slices the PodValue it is given holds: a
// caller that keeps a result past the next Decode into the same value must
// copy them. A field the value lacks comes back empty (not nil) when the
// target held a map or slice. Not safe for concurrent use.
type PodDecoder struct {
	r bytes.Reader
	d *msgpack.Decoder
	b []byte // the value being decoded
	// seen holds short strings decoded before (label keys and common
	// values, phases, port names), so that a bulk load allocates only the
	// strings that differ from pod to pod; bounded by maxInterned.
	seen map[string]string
}

// maxInterned bounds PodDecoder.seen; only strings up to maxInternedLen
// bytes are kept.
const (
	maxInterned    = 4096
	maxInternedLen = 63
)

// errSlowPath: the value is not in the form Decode reads itself.
var errSlowPath = errors.New("crdt: pod value needs the generic decoder")

// Decode decodes b into v.
func (pd *PodDecoder) Decode(b []byte, v *PodValue) error {
	if len(b) <= MaxValueBytes && checkMsgpackLengths(b) == nil {
		if pd.d == nil {
			pd.d = msgpack.NewDecoder(&pd.r)
		}
		pd.r.Reset(b)
		pd.d.Reset(&pd.r)
		pd.b = b
		err := pd.fast(v)
		pd.b = nil
		if err == nil && v.Format != 0 {
			return nil
		}
	}
	*v = PodValue{}
	return DecodeValue(b, v)
}

func isStr(c byte) bool {
	return msgpcode.IsFixedString(c) || c == msgpcode.Str8 || c == msgpcode.Str16 || c == msgpcode.Str32
}

func isMap(c byte) bool { return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 }

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isUint(c byte) bool {
	return msgpcode.IsFixedNum(c) && c <= msgpcode.PosFixedNumHigh ||
		c == msgpcode.Uint8 || c == msgpcode.Uint16 || c == msgpcode.Uint32 || c == msgpcode.Uint64
}

func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || c == msgpcode.Uint8 || c == msgpcode.Uint16 || c == msgpcode.Uint32 ||
		c == msgpcode.Uint64 || c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64
}

// peek returns the next code if ok accepts it, else errSlowPath.
func (pd *PodDecoder) peek(ok func(byte) bool) error {
	c, err := pd.d.PeekCode()
	if err != nil {
		return err
	}
	if !ok(c) {
		return errSlowPath
	}
	return nil
}

// raw returns the bytes of the next string in place (they alias the value
// being decoded): keys are compared, never kept, so they cost nothing.
func (pd *PodDecoder) raw() ([]byte, error) {
	if err := pd.peek(isStr); err != nil {
		return nil, err
	}
	n, err := pd.d.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > pd.r.Len() {
		return nil, io.ErrUnexpectedEOF
	}
	off := len(pd.b) - pd.r.Len()
	if _, err := pd.r.Seek(int64(n), io.SeekCurrent); err != nil {
		return nil, err
	}
	return pd.b[off : off+n : off+n], nil
}

func (pd *PodDecoder) str() (string, error) {
	b, err := pd.raw()
	if err != nil {
		return "", err
	}
	if s, ok := pd.seen[string(b)]; ok {
		return s, nil
	}
	s := string(b)
	if len(s) <= maxInternedLen && len(pd.seen) < maxInterned {
		if pd.seen == nil {
			pd.seen = make(map[string]string, 64)
		}
		pd.seen[s] = s
	}
	return s, nil
}

func (pd *PodDecoder) strs(s []string) ([]string, error) {
	if err := pd.peek(isArray); err != nil {
		return nil, err
	}
	n, err := pd.d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	s = s[:0]
	for range n {
		x, err := pd.str()
		if err != nil {
			return nil, err
		}
		s = append(s, x)
	}
	return s, nil
}

// fast decodes the common form; errSlowPath (or any error) sends the value
// to DecodeValue.
func (pd *PodDecoder) fast(v *PodValue) error {
	labels, ips, ports, egress := v.Labels, v.IPs, v.Ports, v.EgressIPs
	clear(labels)
	*v = PodValue{Labels: labels, IPs: ips[:0], Ports: ports[:0], EgressIPs: egress[:0]}
	if err := pd.peek(isMap); err != nil {
		return err
	}
	n, err := pd.d.DecodeMapLen()
	if err != nil {
		return err
	}
	var seen uint8
	for range n {
		key, err := pd.raw()
		if err != nil {
			return err
		}
		if bit := podFieldBit(key); bit != 0 {
			if seen&bit != 0 {
				return errSlowPath // a repeated field: reflection's rules decide
			}
			seen |= bit
		}
		if err := pd.field(v, key); err != nil {
			return err
		}
	}
	return nil
}

// podFieldBit is the bit of a PodValue field's msgpack key in fast's set
// of fields seen; 0 for a key PodValue does not have.
func podFieldBit(key []byte) uint8 {
	switch string(key) { // no allocation: a switch on converted bytes
	case "v":
		return 1
	case "l":
		return 2
	case "ip":
		return 4
	case "ph":
		return 8
	case "hn":
		return 16
	case "po":
		return 32
	case "eg":
		return 64
	case "nr":
		return 128
	}
	return 0
}

// field decodes the value of key into v (skips an unknown key's value).
func (pd *PodDecoder) field(v *PodValue, key []byte) (err error) {
	switch string(key) {
	case "v":
		if err = pd.peek(isUint); err == nil {
			var f uint64
			f, err = pd.d.DecodeUint64()
			v.Format = uint8(f) // as reflection sets a uint8 field
		}
	case "l":
		err = pd.labels(v)
	case "ip":
		v.IPs, err = pd.strs(v.IPs)
	case "ph":
		v.Phase, err = pd.str()
	case "hn":
		if err = pd.peek(func(c byte) bool { return c == msgpcode.True || c == msgpcode.False }); err == nil {
			v.HostNetwork, err = pd.d.DecodeBool()
		}
	case "po":
		err = pd.ports(v)
	case "eg":
		v.EgressIPs, err = pd.strs(v.EgressIPs)
	case "nr":
		if err = pd.peek(func(c byte) bool { return c == msgpcode.True || c == msgpcode.False }); err == nil {
			v.NotReady, err = pd.d.DecodeBool()
		}
	default:
		err = pd.d.Skip()
	}
	return err
}

func (pd *PodDecoder) labels(v *PodValue) error {
	if err := pd.peek(isMap); err != nil {
		return err
	}
	n, err := pd.d.DecodeMapLen()
	if err != nil {
		return err
	}
	if v.Labels == nil {
		v.Labels = make(map[string]string, n)
	}
	for range n {
		k, err := pd.str()
		if err != nil {
			return err
		}
		val, err := pd.str()
		if err != nil {
			return err
		}
		v.Labels[k] = val
	}
	return nil
}

func (pd *PodDecoder) ports(v *PodValue) error {
	if err := pd.peek(isArray); err != nil {
		return err
	}
	n, err := pd.d.DecodeArrayLen()
	if err != nil {
		return err
	}
	for range n {
		if err := pd.peek(isMap); err != nil {
			return err
		}
		m, err := pd.d.DecodeMapLen()
		if err != nil {
			return err
		}
		var p NamedPort
		var seen uint8
		for range m {
			rawKey, err := pd.raw()
			if err != nil {
				return err
			}
			key := string(rawKey) // compared only: not allocated
			var bit uint8
			switch key {
			case "n":
				bit = 1
			case "p":
				bit = 2
			case "t":
				bit = 4
			}
			if seen&bit != 0 {
				return errSlowPath
			}
			seen |= bit
			switch key {
			case "n":
				p.Name, err = pd.str()
			case "t":
				p.Protocol, err = pd.str()
			case "p":
				if err = pd.peek(isInt); err == nil {
					var x int64
					x, err = pd.d.DecodeInt64()
					p.Port = int32(x) // as reflection sets an int32 field
				}
			default:
				err = pd.d.Skip()
			}
			if err != nil {
				return err
			}
		}
		v.Ports = append(v.Ports, p)
	}
	return nil
}
