// The matmul op family (registered by register_matmul_ops): matmul and two-operand einsum.
//
// Both are one computation: a two-operand einsum "A,B->O" (matmul(a, b, ta, tb) on ranks ra, rb
// is "<batch>mk,<batch>kn->mn" with "km" / "nk" for the transposed operands; batch dims align
// from the right like numpy, a missing one broadcasts, present ones must be EQUAL: size-1
// broadcasting of batch dims is not supported). Every letter is one of
//   batch       in A, B and O        contracted  in A and B, not O
//   m (a-only)  in A and O           n (b-only)  in B and O
//   summed      in one operand only (summed out before the product)
//
// Sharding rule (no communication where the math allows it):
//   - batch letters keep their sharding; a letter sharded on one side only is demanded sharded
//     the same way on the other side when that operand has those mesh dims free (a local slice,
//     or a reduce-scatter of the other's own pending sum), else unsharded on both;
//   - m keeps a's sharding (output rows), n keeps b's (output columns); m and n (or any a-only
//     and b-only letters) sharded over the same mesh dim: the smaller operand's is unsharded;
//   - a contracted letter sharded the same way on both sides: the output is Partial(sum) over
//     those mesh dims (Megatron's row-parallel matmul), as is a summed letter that is sharded;
//   - Partial(sum) inputs: one Partial input keeps its pending sum (matmul is linear in it)
//     unless the other operand shards over that mesh dim (then it is reduced there first); both
//     Partial: the smaller one is reduced; other pending ops (max, ...) are reduced first.
// The local kernel is the einsum of the local blocks: operands laid out as [batch, m, k] and
// [batch, k, n] (read in place when their letters are already in that order or transposed,
// otherwise copied once), one OpenBLAS gemm per batch entry, single-threaded (devices run
// concurrently; OpenBLAS is told to use one thread before the first gemm). bf16 operands: f32
// sums, the output rounded once to bf16 (blas.h's gemm_bf16; a GPU device stages them on the host);
// f16 operands: blas.h's gemm_f16 (MKL's hgemm: f16 sums).
//
// Gradients: dA = einsum("O,B->A"), dB = einsum("A,O->B") (letters only in one operand: the
// gradient is broadcast back over them with reduce_sum_grad).

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "core/errors.h"
#include "dtensor/framework/op_util.h"
#include "dtensor/ops/einsum_gemm.h"
#include "dtensor/ops/einsum_rule.h"
#include "dtensor/ops/op_families.h"
#include "tessel/core/blas.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kMatmul = "matmul";
constexpr std::string_view kEinsum = "einsum";

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// One letter per dimension of each operand and of the output.
struct Equation {
  std::string a, b, out;
  std::string text() const { return a + "," + b + "->" + out; }
};

// Checks one operand's letters against its shape and records each letter's extent.
void bind_letters(const std::string& letters, const Shape& shape, int operand, const Shape& other,
                  std::vector<int64_t>& size, const std::string& equation) {
  if (static_cast<int>(letters.size()) != shape.rank()) {
    throw_invalid(kEinsum, "operand {} of '{}' has {} letters ('{}') but its shape {} has rank {}",
                  operand, equation, letters.size(), letters, shape.to_string(), shape.rank());
  }
  for (size_t i = 0; i < letters.size(); ++i) {
    const char c = letters[i];
    if (letters.find(c, i + 1) != std::string::npos) {
      throw_invalid(kEinsum,
                    "letter '{}' repeats in operand {} ('{}') of '{}'; diagonals are not supported",
                    c, operand, letters, equation);
    }
    const int64_t extent = shape[static_cast<int>(i)];
    int64_t& slot = size[static_cast<unsigned char>(c)];
    if (slot >= 0 && slot != extent) {
      throw_invalid(kEinsum,
                    "letter '{}' of '{}' is {} in operand 0 (shape {}) but {} in operand 1 "
                    "(shape {})",
                    c, equation, slot, other.to_string(), extent, shape.to_string());
    }
    slot = extent;
  }
}

// Parses "ab,bc->ac" (spaces ignored; without "->" the output is the letters that appear once,
// sorted) against the operands' shapes. Errors name the equation and the offending letter.
Equation parse_equation(const std::string& equation, const Shape& sa, const Shape& sb) {
  std::string s;
  for (char c : equation) {
    if (c != ' ') s += c;
  }
  if (s.find("...") != std::string::npos) {
    throw_invalid(kEinsum, "ellipsis ('...') in '{}' is not supported; name every dimension",
                  equation);
  }
  const size_t arrow = s.find("->");
  if (arrow != std::string::npos && s.find("->", arrow + 2) != std::string::npos) {
    throw_invalid(kEinsum, "'{}' has more than one '->'", equation);
  }
  const std::string lhs = s.substr(0, arrow);
  const size_t comma = lhs.find(',');
  if (comma == std::string::npos || lhs.find(',', comma + 1) != std::string::npos) {
    throw_invalid(kEinsum, "'{}' must name exactly two operands (one ',' before '->')", equation);
  }
  Equation eq{lhs.substr(0, comma), lhs.substr(comma + 1), {}};
  const bool explicit_out = arrow != std::string::npos;
  if (explicit_out) eq.out = s.substr(arrow + 2);
  for (const std::string* part : {&eq.a, &eq.b, &eq.out}) {
    for (char c : *part) {
      if (!is_letter(c)) {
        throw_invalid(kEinsum, "invalid character '{}' in '{}' (letters a-z, A-Z only)", c,
                      equation);
      }
    }
  }
  std::vector<int64_t> size(128, -1);
  bind_letters(eq.a, sa, 0, sa, size, equation);
  bind_letters(eq.b, sb, 1, sa, size, equation);
  if (!explicit_out) {
    for (char c : eq.a + eq.b) {
      if (std::count(eq.a.begin(), eq.a.end(), c) + std::count(eq.b.begin(), eq.b.end(), c) == 1) {
        eq.out += c;
      }
    }
    std::sort(eq.out.begin(), eq.out.end());
  }
  for (size_t i = 0; i < eq.out.size(); ++i) {
    const char c = eq.out[i];
    if (!has(eq.a, c) && !has(eq.b, c)) {
      throw_invalid(kEinsum, "output letter '{}' of '{}' appears in neither operand ('{}', '{}')",
                    c, equation, eq.a, eq.b);
    }
    if (eq.out.find(c, i + 1) != std::string::npos) {
      throw_invalid(kEinsum, "output letter '{}' repeats in '{}'", c, equation);
    }
  }
  return eq;
}

// matmul as an einsum. Ranks >= 2, batch dims aligned from the right (checked by matmul_infer).
Equation matmul_equation(int rank_a, int rank_b, bool transpose_a, bool transpose_b) {
  static const std::string kPool = "abcdefghijlopqrstuvwxyzABCDEFGHIJKLOPQRSTUVWXYZ";
  const int batch = std::max(rank_a, rank_b) - 2;
  if (batch > static_cast<int>(kPool.size())) {
    throw_invalid(kMatmul, "at most {} batch dimensions are supported, got {}", kPool.size(),
                  batch);
  }
  const std::string letters = kPool.substr(0, static_cast<size_t>(batch));
  Equation eq;
  eq.a = letters.substr(static_cast<size_t>(batch - (rank_a - 2))) + (transpose_a ? "km" : "mk");
  eq.b = letters.substr(static_cast<size_t>(batch - (rank_b - 2))) + (transpose_b ? "nk" : "kn");
  eq.out = letters + "mn";
  return eq;
}

void require_float_pair(const TensorSpec& a, const TensorSpec& b, std::string_view op) {
  if (a.dtype != b.dtype) {
    throw_invalid(op, "operands have different dtypes: {} {} and {} {}", a.shape.to_string(),
                  dtype_name(a.dtype), b.shape.to_string(), dtype_name(b.dtype));
  }
  if (a.dtype != DType::kBF16 && a.dtype != DType::kF16) require_float(a.dtype, op, "dtype");
}

Shape output_shape(const Equation& eq, const Shape& sa, const Shape& sb) {
  std::vector<int64_t> dims;
  for (char c : eq.out) {
    const size_t ia = eq.a.find(c);
    dims.push_back(ia != std::string::npos ? sa[static_cast<int>(ia)]
                                           : sb[static_cast<int>(eq.b.find(c))]);
  }
  return Shape(dims);
}

Equation matmul_checked(const Shape& sa, const Shape& sb, const OpAttrs& attrs) {
  if (sa.rank() < 2 || sb.rank() < 2) {
    throw_invalid(kMatmul, "operands need rank >= 2, got shapes {} and {}", sa.to_string(),
                  sb.to_string());
  }
  const Equation eq = matmul_equation(sa.rank(), sb.rank(), attrs.transpose_a, attrs.transpose_b);
  const int64_t ka = sa[attrs.transpose_a ? sa.rank() - 2 : sa.rank() - 1];
  const int64_t kb = sb[attrs.transpose_b ? sb.rank() - 1 : sb.rank() - 2];
  if (ka != kb) {
    throw_invalid(kMatmul,
                  "inner dimensions do not match: a {} (transpose_a={}) has k={}, b {} "
                  "(transpose_b={}) has k={}",
                  sa.to_string(), attrs.transpose_a, ka, sb.to_string(), attrs.transpose_b, kb);
  }
  const int batch = std::min(sa.rank(), sb.rank()) - 2;
  for (int i = 1; i <= batch; ++i) {
    const int64_t da = sa[sa.rank() - 2 - i];
    const int64_t db = sb[sb.rank() - 2 - i];
    if (da != db) {
      throw_invalid(kMatmul,
                    "batch dimensions of {} and {} differ ({} vs {}); batch dims must be equal "
                    "(a missing leading one broadcasts, size 1 does not)",
                    sa.to_string(), sb.to_string(), da, db);
    }
  }
  return eq;
}

Equation equation_of(std::string_view op, const Shape& sa, const Shape& sb, const OpAttrs& attrs) {
  return op == kMatmul ? matmul_checked(sa, sb, attrs) : parse_equation(attrs.equation, sa, sb);
}

// ---- sharding rule ---------------------------------------------------------------------------

struct Operand {
  SpecList spec;
  std::vector<PartialDim> partial;
  int64_t bytes;
};

bool contains(const std::vector<std::string>& dims, const std::string& d) {
  return std::find(dims.begin(), dims.end(), d) != dims.end();
}

bool pending(const Operand& x, const std::string& d) {
  for (const PartialDim& p : x.partial) {
    if (p.mesh_dim == d) return true;
  }
  return false;
}

// True when some letter of x other than `except` is sharded over mesh dim d.
bool uses(const Operand& x, const std::string& d, int except = -1) {
  for (size_t i = 0; i < x.spec.size(); ++i) {
    if (static_cast<int>(i) != except && contains(x.spec[i], d)) return true;
  }
  return false;
}

// Whether x's letter `index` may be sharded over `dims`: x has them free (a pending sum of x's
// own over them becomes a reduce-scatter) and the other operand holds no pending sum over them.
bool can_take(const Operand& x, int index, const std::vector<std::string>& dims,
              const Operand& other) {
  for (const std::string& d : dims) {
    if (uses(x, d, index) || pending(other, d)) return false;
  }
  return true;
}

void take(Operand& x, int index, const std::vector<std::string>& dims) {
  x.spec[static_cast<size_t>(index)] = dims;
  std::erase_if(x.partial, [&](const PartialDim& p) { return contains(dims, p.mesh_dim); });
}

ShardingDecision einsum_rule(const Equation& eq, const TensorSpec& ta, const TensorSpec& tb) {
  const int64_t elem = static_cast<int64_t>(dtype_size(ta.dtype));
  Operand a{spec_list(ta.layout), ta.layout.partial(), ta.shape.num_elements() * elem};
  Operand b{spec_list(tb.layout), tb.layout.partial(), tb.shape.num_elements() * elem};
  Operand& small = a.bytes <= b.bytes ? a : b;
  Operand& large = a.bytes <= b.bytes ? b : a;

  // 1. Only pending sums commute with the product; with two Partial operands the smaller one
  //    is reduced.
  for (Operand* x : {&a, &b}) {
    std::erase_if(x->partial, [](const PartialDim& p) { return p.op != ReduceOp::kSum; });
  }
  if (!a.partial.empty() && !b.partial.empty()) small.partial.clear();

  // 2. Letters of both operands (batch, contracted) get the same sharding on both sides: the
  //    smaller operand takes the other's first (cheaper), else the larger the smaller's, else
  //    neither is sharded there.
  for (size_t ia = 0; ia < eq.a.size(); ++ia) {
    const size_t ib = eq.b.find(eq.a[ia]);
    if (ib == std::string::npos || a.spec[ia] == b.spec[ib]) continue;
    const auto index = [&](const Operand& x) { return static_cast<int>(&x == &a ? ia : ib); };
    bool done = false;
    for (auto [x, y] : {std::pair<Operand*, Operand*>{&small, &large}, {&large, &small}}) {
      const std::vector<std::string> want = y->spec[static_cast<size_t>(index(*y))];
      if (!want.empty() && can_take(*x, index(*x), want, *y)) {
        take(*x, index(*x), want);
        done = true;
        break;
      }
    }
    if (!done) {
      a.spec[ia].clear();
      b.spec[ib].clear();
    }
  }

  // 3. A mesh dim cannot shard both an a-only and a b-only letter (m and n, or a summed one):
  //    the smaller operand's letter is unsharded.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t ia = 0; ia < eq.a.size() && !changed; ++ia) {
      if (has(eq.b, eq.a[ia])) continue;
      for (size_t ib = 0; ib < eq.b.size() && !changed; ++ib) {
        if (has(eq.a, eq.b[ib])) continue;
        for (const std::string& d : a.spec[ia]) {
          if (!contains(b.spec[ib], d)) continue;
          (&small == &a ? a.spec[ia] : b.spec[ib]).clear();
          changed = true;
          break;
        }
      }
    }
  }

  // 4. A pending sum stays pending only where the other operand is replicated.
  for (auto [x, y] : {std::pair<Operand*, Operand*>{&a, &b}, {&b, &a}}) {
    const Operand* other = y;  // (clang before 16 cannot capture a structured binding)
    std::erase_if(x->partial, [&](const PartialDim& p) { return uses(*other, p.mesh_dim); });
  }

  const Mesh& mesh = ta.layout.mesh();
  SpecList out;
  for (char c : eq.out) {
    const size_t ia = eq.a.find(c);
    out.push_back(ia != std::string::npos ? a.spec[ia] : b.spec[eq.b.find(c)]);
  }
  std::vector<PartialDim> partial;
  const auto add_partial = [&](const std::string& d) {
    for (const PartialDim& p : partial) {
      if (p.mesh_dim == d) return;
    }
    partial.push_back({d, ReduceOp::kSum});
  };
  for (const PartialDim& p : a.partial) add_partial(p.mesh_dim);
  for (const PartialDim& p : b.partial) add_partial(p.mesh_dim);
  for (size_t ia = 0; ia < eq.a.size(); ++ia) {
    if (has(eq.out, eq.a[ia])) continue;
    for (const std::string& d : a.spec[ia]) add_partial(d);  // contracted or summed in a
  }
  for (size_t ib = 0; ib < eq.b.size(); ++ib) {
    if (has(eq.out, eq.b[ib]) || has(eq.a, eq.b[ib])) continue;
    for (const std::string& d : b.spec[ib]) add_partial(d);  // summed in b
  }
  ShardingDecision d;
  d.inputs.push_back(make_layout(mesh, a.spec, a.partial));
  d.inputs.push_back(make_layout(mesh, b.spec, b.partial));
  d.output = make_layout(mesh, out, std::move(partial));
  return d;
}

// ---- local kernel ----------------------------------------------------------------------------

template <typename T>
void accumulate(T& sum, T x) {
  sum += x;
}
void accumulate(bfloat16& sum, bfloat16 x) { sum = bfloat16(float(sum) + float(x)); }
void accumulate(float16& sum, float16 x) { sum = float16(float(sum) + float(x)); }

// dst (contiguous, letters `dst_letters`) from src (contiguous, letters `src_letters`): a
// permutation, summing over src letters that dst lacks (dst must then start zeroed).
template <typename T>
void rearrange(const T* src, const std::string& src_letters, T* dst, const std::string& dst_letters,
               const std::vector<int64_t>& size) {
  const size_t r = src_letters.size();
  std::vector<int64_t> dst_stride_of(128, 0);
  int64_t stride = 1;
  for (size_t i = dst_letters.size(); i-- > 0;) {
    dst_stride_of[static_cast<unsigned char>(dst_letters[i])] = stride;
    stride *= size[static_cast<unsigned char>(dst_letters[i])];
  }
  // Collapse the src dims into runs (dims of extent 1 dropped).
  std::vector<int64_t> shape, ss, ds;
  int64_t src_stride = 1;
  std::vector<int64_t> src_strides(r);
  for (size_t i = r; i-- > 0;) {
    src_strides[i] = src_stride;
    src_stride *= size[static_cast<unsigned char>(src_letters[i])];
  }
  if (src_stride == 0) return;
  for (size_t i = 0; i < r; ++i) {
    const int64_t e = size[static_cast<unsigned char>(src_letters[i])];
    const int64_t sd = dst_stride_of[static_cast<unsigned char>(src_letters[i])];
    if (e == 1) continue;
    if (!shape.empty() && ss.back() == src_strides[i] * e && ds.back() == sd * e) {
      shape.back() *= e;
      ss.back() = src_strides[i];
      ds.back() = sd;
      continue;
    }
    shape.push_back(e);
    ss.push_back(src_strides[i]);
    ds.push_back(sd);
  }
  const bool sums = [&] {
    for (char c : src_letters) {
      if (!has(dst_letters, c) && size[static_cast<unsigned char>(c)] > 1) return true;
    }
    return false;
  }();
  const auto run = [&](int64_t so, int64_t d_o, int64_t n, int64_t s, int64_t d) {
    if (sums) {
      for (int64_t j = 0; j < n; ++j) accumulate(dst[d_o + j * d], src[so + j * s]);
    } else {
      for (int64_t j = 0; j < n; ++j) dst[d_o + j * d] = src[so + j * s];
    }
  };
  if (shape.empty()) {
    run(0, 0, 1, 0, 0);
    return;
  }
  const size_t q = shape.size();
  std::vector<int64_t> idx(q - 1, 0);
  int64_t so = 0, d_o = 0;
  while (true) {
    run(so, d_o, shape[q - 1], ss[q - 1], ds[q - 1]);
    size_t d = q - 1;
    bool carried_out = true;
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) {
        so += ss[d];
        d_o += ds[d];
        carried_out = false;
        break;
      }
      so -= ss[d] * (shape[d] - 1);
      d_o -= ds[d] * (shape[d] - 1);
      idx[d] = 0;
    }
    if (carried_out) return;
  }
}

// One operand as a batch of row-major matrices: op(p + i * stride) is [rows, cols] with leading
// dimension ld, transposed in memory when `trans`.
template <typename T>
struct Matrices {
  const T* p = nullptr;
  bool trans = false;
  int64_t ld = 1;
  int64_t stride = 0;
  std::vector<T> copy;
};

// The operand with `letters` as [batch, rows, cols] (letters bl + rl + cl), in place when its
// letters are in that order or in batch + cols + rows order, else rearranged into a copy. A
// letter in neither the other operand nor the output (summed out) is in none of bl, rl and cl,
// so such an operand is always copied, and the rearrangement sums it out.
template <typename T>
void as_matrices(const T* data, const std::string& letters, const std::string& bl,
                 const std::string& rl, const std::string& cl, int64_t rows, int64_t cols,
                 const std::vector<int64_t>& size, Matrices<T>& m) {
  m.stride = rows * cols;
  if (letters == bl + rl + cl) {
    m.p = data;
    m.ld = cols;
    return;
  }
  if (letters == bl + cl + rl) {
    m.p = data;
    m.trans = true;
    m.ld = rows;
    return;
  }
  int64_t batch = 1;
  for (char c : bl) batch *= size[static_cast<unsigned char>(c)];
  m.copy.assign(static_cast<size_t>(batch * rows * cols), T(0));
  rearrange(data, letters, m.copy.data(), bl + rl + cl, size);
  m.p = m.copy.data();
  m.ld = cols;
}

// The letters of one block's einsum by role, and the product's extents.
struct Grouping {
  std::vector<int64_t> size;   // extent per letter
  std::string bl, ml, nl, kl;  // batch, a-only (m), b-only (n), contracted (k) letters
  int64_t batch = 1, m = 1, n = 1, k = 1;
};

Grouping group_letters(const Equation& eq, const Shape& a, const Shape& b, const Shape& out) {
  Grouping g;
  g.size.assign(128, -1);
  std::vector<int64_t>& size = g.size;
  const auto bind = [&](const std::string& letters, const Shape& shape) {
    for (size_t i = 0; i < letters.size(); ++i) {
      int64_t& slot = size[static_cast<unsigned char>(letters[i])];
      const int64_t e = shape[static_cast<int>(i)];
      if (slot >= 0 && slot != e) {
        throw_error(ErrorCode::kInternal, kEinsum,
                    "local blocks disagree on letter '{}' ({} vs {}) for '{}'", letters[i], slot, e,
                    eq.text());
      }
      slot = e;
    }
  };
  bind(eq.a, a);
  bind(eq.b, b);
  bind(eq.out, out);
  for (char c : eq.out) {
    (has(eq.a, c) && has(eq.b, c) ? g.bl : has(eq.a, c) ? g.ml : g.nl) += c;
  }
  for (char c : eq.a) {
    if (has(eq.b, c) && !has(eq.out, c)) g.kl += c;
  }
  const auto product = [&](const std::string& letters) {
    int64_t p = 1;
    for (char c : letters) p *= size[static_cast<unsigned char>(c)];
    return p;
  };
  g.batch = product(g.bl);
  g.m = product(g.ml);
  g.n = product(g.nl);
  g.k = product(g.kl);
  return g;
}

// True when an operand's letters outside `theirs` and the output are summed out first.
bool sums_out(const Equation& eq, const std::string& mine, const std::string& theirs) {
  for (char c : mine) {
    if (!has(theirs, c) && !has(eq.out, c)) return true;
  }
  return false;
}

template <typename T>
void einsum_block(const Equation& eq, const Tensor& a_in, const Tensor& b_in, Tensor& out) {
  if (out.num_elements() == 0) return;
  const Grouping g = group_letters(eq, a_in.shape(), b_in.shape(), out.shape());
  const std::vector<int64_t>& size = g.size;
  const std::string &bl = g.bl, &ml = g.ml, &nl = g.nl, &kl = g.kl;
  const int64_t batch = g.batch, m = g.m, n = g.n, k = g.k;
  const Tensor a_c = a_in.contiguous();
  const Tensor b_c = b_in.contiguous();
  T* o = out.data<T>();
  Matrices<T> ma, mb;
  as_matrices(a_c.data<T>(), eq.a, bl, ml, kl, m, k, size, ma);
  as_matrices(b_c.data<T>(), eq.b, bl, kl, nl, k, n, size, mb);
  // The output in place when its letters are batch + m + n (or batch + n + m: computed as the
  // transposed product), else through a buffer.
  const bool direct = eq.out == bl + ml + nl;
  const bool transposed = !direct && eq.out == bl + nl + ml;
  std::vector<T> buffer;
  T* c = o;
  if (!direct && !transposed) {
    buffer.resize(static_cast<size_t>(batch * m * n));
    c = buffer.data();
  }
  if (k == 0) {
    std::fill(c, c + batch * m * n, T(0));
  } else if (m > 0 && n > 0) {
    // A batch of small products (attention's heads) is split over the intra-op threads by
    // product; a single large one splits its own rows inside gemm.
    const auto products = [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const T* pa = ma.p + i * ma.stride;
        const T* pb = mb.p + i * mb.stride;
        T* pc = c + i * m * n;
        if (transposed) {
          blas_gemm(!mb.trans, !ma.trans, n, m, k, pb, mb.ld, pa, ma.ld, pc, m);
        } else {
          blas_gemm(ma.trans, mb.trans, m, n, k, pa, ma.ld, pb, mb.ld, pc, n);
        }
      }
    };
    constexpr int64_t kMinFlopsPerThread = int64_t{1} << 21;
    tessel::parallel_for(batch, std::max<int64_t>(1, kMinFlopsPerThread / (2 * m * n * k)),
                         products);
  }
  if (!buffer.empty()) rearrange(buffer.data(), bl + ml + nl, o, eq.out, size);
}

}  // namespace

std::optional<EinsumGemm> einsum_gemm(std::string_view op, const Tensor& a, const Tensor& b,
                                      const Tensor& out, const OpAttrs& attrs,
                                      const LocalContext& context) {
  const Equation eq = equation_of(op, context.input_shapes[0], context.input_shapes[1], attrs);
  if (sums_out(eq, eq.a, eq.b) || sums_out(eq, eq.b, eq.a)) return std::nullopt;
  const Grouping g = group_letters(eq, a.shape(), b.shape(), out.shape());
  EinsumGemm gemm;
  gemm.batch = g.batch;
  gemm.m = g.m;
  gemm.n = g.n;
  gemm.k = g.k;
  // An operand is read in place as [batch, rows, cols] or [batch, cols, rows] (transposed).
  const auto place = [&](const std::string& letters, const std::string& rl, const std::string& cl,
                         int64_t rows, int64_t cols, bool& trans, int64_t& ld) {
    if (letters == g.bl + rl + cl) {
      trans = false;
      ld = cols;
      return true;
    }
    if (letters == g.bl + cl + rl) {
      trans = true;
      ld = rows;
      return true;
    }
    return false;
  };
  if (!place(eq.a, g.ml, g.kl, g.m, g.k, gemm.a_trans, gemm.lda) ||
      !place(eq.b, g.kl, g.nl, g.k, g.n, gemm.b_trans, gemm.ldb)) {
    return std::nullopt;
  }
  gemm.a_stride = g.m * g.k;
  gemm.b_stride = g.k * g.n;
  if (eq.out == g.bl + g.nl + g.ml) {
    gemm.out_transposed = true;
  } else if (eq.out != g.bl + g.ml + g.nl) {
    return std::nullopt;
  }
  return gemm;
}

ShardingDecision einsum_sharding(const std::string& a_letters, const std::string& b_letters,
                                 const std::string& out_letters, const TensorSpec& a,
                                 const TensorSpec& b) {
  return einsum_rule({a_letters, b_letters, out_letters}, a, b);
}

namespace {

void einsum_kernel(std::string_view op, const std::vector<Tensor>& inputs, Tensor& output,
                   const OpAttrs& attrs, const LocalContext& context) {
  const Equation eq = equation_of(op, context.input_shapes[0], context.input_shapes[1], attrs);
  if (output.dtype() == DType::kBF16) {
    einsum_block<bfloat16>(eq, inputs[0], inputs[1], output);
  } else if (output.dtype() == DType::kF16) {
    einsum_block<float16>(eq, inputs[0], inputs[1], output);
  } else {
    dispatch_float(output.dtype(), op,
                   [&]<typename T>() { einsum_block<T>(eq, inputs[0], inputs[1], output); });
  }
}

// ---- gradients -------------------------------------------------------------------------------

// d loss / d target for target = einsum(x, y) summed into an operand with letters `target`:
// einsum(x, y -> target's letters found in x or y), broadcast over the others.
DTensor operand_grad(const DTensor& x, const std::string& lx, const DTensor& y,
                     const std::string& ly, const std::string& target, const DTensor& like) {
  std::string kept;
  OpAttrs broadcast;
  for (size_t i = 0; i < target.size(); ++i) {
    if (has(lx, target[i]) || has(ly, target[i])) {
      kept += target[i];
    } else {
      broadcast.axes.push_back(static_cast<int64_t>(i));
    }
  }
  DTensor g = einsum(lx + "," + ly + "->" + kept, x, y);
  if (broadcast.axes.empty()) return g;
  broadcast.shape = like.shape().dims();
  broadcast.layout = like.layout();
  broadcast.scale = 1.0;
  return call_op("reduce_sum_grad", {g}, broadcast);
}

std::vector<DTensor> einsum_vjp(std::string_view op, const VjpArgs& args) {
  const DTensor& a = args.inputs[0];
  const DTensor& b = args.inputs[1];
  const Equation eq = equation_of(op, a.shape(), b.shape(), *args.attrs);
  return {args.wants(0) ? operand_grad(args.grad, eq.out, b, eq.b, eq.a, a) : DTensor(),
          args.wants(1) ? operand_grad(a, eq.a, args.grad, eq.out, eq.b, b) : DTensor()};
}

void add_op(OpRegistry& registry, std::string_view name) {
  OpDef def;
  def.name = std::string(name);
  def.num_inputs = 2;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
    require_float_pair(in[0], in[1], name);
    const Equation eq = equation_of(name, in[0].shape, in[1].shape, attrs);
    return TensorSpec{output_shape(eq, in[0].shape, in[1].shape), in[0].dtype, {}};
  };
  def.shard = [name](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& attrs) {
    return einsum_rule(equation_of(name, in[0].shape, in[1].shape, attrs), in[0], in[1]);
  };
  def.kernel = [name](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                      const LocalContext& context) {
    einsum_kernel(name, in, out, attrs, context);
  };
  def.vjp = [name](const VjpArgs& args) { return einsum_vjp(name, args); };
  def.vjp_skips_unwanted = true;
  def.saves = VjpSaves::of_inputs({0, 1});
  registry.add(std::move(def));
}

}  // namespace

void register_matmul_ops(OpRegistry& registry) {
  add_op(registry, kMatmul);
  add_op(registry, kEinsum);
}

}  // namespace detail

DTensor matmul(const DTensor& a, const DTensor& b, bool transpose_a, bool transpose_b) {
  OpAttrs attrs;
  attrs.transpose_a = transpose_a;
  attrs.transpose_b = transpose_b;
  return call_op("matmul", {a, b}, attrs);
}

DTensor einsum(const std::string& equation, const DTensor& a, const DTensor& b) {
  OpAttrs attrs;
  attrs.equation = equation;
  return call_op("einsum", {a, b}, attrs);
}

}  // namespace tessel
