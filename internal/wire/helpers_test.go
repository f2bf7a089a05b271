package wire

// md builds metadata from key, value pairs.
func md(kv ...string) map[string]*string {
	out := map[string]*string{}
	for i := 0; i < len(kv); i += 2 {
		v := kv[i+1]
		out[kv[i]] = &v
	}
	return out
}
