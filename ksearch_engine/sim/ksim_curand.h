// ksim_curand.h - cuRAND's device API for its default generator, XORWOW (curand_kernel.h's curandState):
// curand_init, curand, curand_uniform(_double), curand_normal(_double, 2, 2_double), curand_log_normal,
// skipahead, skipahead_sequence. Where the code includes curand_kernel.h (the capture's stand-in header includes
// this one; the kernel-only preprocessing turns that include into this one), so that the original kernels a
// capture or a check runs draw cuRAND's sequence; the translator (translate/curand.py) puts the same text, in each
// port's dialect, into the ports of kernels that call it: both sides run one algorithm.
//
// The generator is Marsaglia's xorwow (five 32-bit words v, shifted; a Weyl counter d added to the output), seeded
// as cuRAND seeds it, with subsequence n starting n * 2^67 draws along the sequence and the offset further draws.
// Skipping ahead: v's step is a linear map M over GF(2)^160 whose characteristic polynomial P (degree 160,
// primitive) is KSC_XORWOW_P; M^e = (x^e mod P)(M), so a jump multiplies the polynomials x^(2^k) mod P (table: k in
// 0..63 for offsets, 67..130 for subsequences) of e's bits, then sums the states M^i v of the result's terms. d moves
// by 362437 per draw (a subsequence's 2^67 draws leave it as it is).
//
// Between the markers below the text is dialect-neutral: the KSC_ words are replaced for each port
// (translate/curand.py); here they are C++ for the simulator.
#pragma once
#define KSC_FN inline
#define KSC_U32 unsigned int
#define KSC_U64 unsigned long long
#define KSC_T
#define KSC_SP
#define KSC_TABLE static const
#define KSC_F64 double
#define KSC_SLOT64 double
#define KSC_PUT64(x) (x)
#define KSC_GET64(x) (x)
#define KSC_F2 float2
#define KSC_D2 double2
#define KSC_MAKE_F2 make_float2
#define KSC_MAKE_D2 make_double2
#define KSC_LOGF logf
#define KSC_SQRTF sqrtf
#define KSC_SINF sinf
#define KSC_COSF cosf
#define KSC_EXPF expf
#define KSC_LOG64 log
#define KSC_SQRT64 sqrt
#define KSC_SIN64 sin
#define KSC_COS64 cos
#define KSC_EXP64 exp
// KSC-TYPES-BEGIN
struct curandStateXORWOW {
  KSC_U32 d;
  KSC_U32 v[5];
  int boxmuller_flag;
  int boxmuller_flag_double;
  float boxmuller_extra;
  KSC_SLOT64 boxmuller_extra_double;
};
typedef struct curandStateXORWOW curandStateXORWOW_t;
typedef struct curandStateXORWOW curandState_t;
typedef struct curandStateXORWOW curandState;
// KSC-TYPES-END
// KSC-COMMON-BEGIN
KSC_TABLE KSC_U32 KSC_XORWOW_P[5] = {0x00060001u, 0x08610030u, 0x00062121u, 0x0f3c0035u, 0x00000f0eu};
KSC_TABLE KSC_U32 KSC_XORWOW_JUMP[640] = {
  0x00000002u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000004u, 0x00000000u, 0x00000000u,
  0x00000000u, 0x00000000u, 0x00000010u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000100u,
  0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00010000u, 0x00000000u, 0x00000000u, 0x00000000u,
  0x00000000u, 0x00000000u, 0x00000001u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u,
  0x00000001u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000001u,
  0xbebd3534u, 0x7064f5bcu, 0x20be29ebu, 0x536d5b32u, 0x063a0069u, 0x9df022beu, 0x4c2ee09fu, 0x0939c7c8u,
  0xe711c2f8u, 0xc6f135aeu, 0xed64ec08u, 0xafc48684u, 0xd81c59eeu, 0x1640314fu, 0x2bf0ccefu, 0x16ade0a0u,
  0x3ff6a2d3u, 0x4746bd83u, 0x2e65a497u, 0x263e40a4u, 0x9d10e028u, 0xee56d79cu, 0xfb1b3286u, 0x0f747418u,
  0x26f9476du, 0x284e9f80u, 0x95328d41u, 0x97ec0360u, 0x1e655d95u, 0x60a9306fu, 0x3f490634u, 0x9ae593fcu,
  0x1a95bb6bu, 0xda10a3fcu, 0xa3abaf54u, 0xa80ecea0u, 0x392ca981u, 0x191e801eu, 0xceb66042u, 0x2f4edc3fu,
  0xfb9680e9u, 0xbdaba0b2u, 0x3986540fu, 0x23fe6cccu, 0x0994e82fu, 0x4d53badbu, 0x3e30e97du, 0x19abbaf6u,
  0x5cd52f87u, 0x98663641u, 0x32da6db4u, 0x80135829u, 0x3abd4734u, 0x2060c3f9u, 0x38b2dd97u, 0xbd3a57bdu,
  0x066101a8u, 0x0b4f188eu, 0x16890623u, 0x8bf58771u, 0x0c5b636fu, 0x4407a814u, 0x60204515u, 0x5bd4dbd2u,
  0x2509eeb5u, 0xa87f2bfeu, 0x0143dfcbu, 0x4b5142bau, 0xfd21a24bu, 0x3dac4527u, 0x21e9179du, 0x2b57aa94u,
  0x5f06e1fcu, 0x6735dc98u, 0x9aa0181fu, 0x4a85a684u, 0x2ff777f0u, 0x8e58b0edu, 0xd4e84a39u, 0x6d37f6a0u,
  0x793adf2bu, 0x3d3e75c8u, 0x0b091758u, 0x9deb3f50u, 0xbcd116ecu, 0x89c7a15du, 0x43629d41u, 0x8a870ba5u,
  0xa7916f56u, 0x9db15489u, 0xfa8fc346u, 0x694921b1u, 0xf2bd4c48u, 0x8b05ae1bu, 0x2de7aee2u, 0xbc1bc6b9u,
  0xd73ea395u, 0xfbdd753du, 0xe45dbacdu, 0x7b16eae0u, 0xf144e1f3u, 0xb9b4b3c4u, 0x8222f622u, 0x9072105au,
  0x66083550u, 0xd88a6c5eu, 0x9ac20a72u, 0x209ef9a8u, 0xe8e4fd8au, 0x1ec855a5u, 0xbd734cf1u, 0x9254a905u,
  0xfb38236du, 0x11e62fd3u, 0xf9e7d21eu, 0x8d333839u, 0x69fed6dfu, 0x79338fdeu, 0xa38a8714u, 0x0e538bcau,
  0x943999e4u, 0xc05db913u, 0x4e4010f3u, 0x9b865d3du, 0x0fd64174u, 0x13da6451u, 0x4f1636fau, 0x6e523e62u,
  0xac374f44u, 0x69a2e37fu, 0x19eb1bbbu, 0xbaea3750u, 0x0fa8f206u, 0xd49dd019u, 0x9b3bccafu, 0x013e4fc6u,
  0x8fb0b988u, 0xbad0233bu, 0x63941ad7u, 0xf5f02d75u, 0xc97b5642u, 0x2ebac13du, 0xbfe04058u, 0x2c6a7132u,
  0x576780a5u, 0x4add1023u, 0x5f64e54eu, 0xb0c250a8u, 0xcf4bd212u, 0x9a873149u, 0x0ac5eea9u, 0xa37bfcd3u,
  0x790ec91du, 0xba339dbcu, 0xc83db5cdu, 0x67dd06cbu, 0xcbfe08ecu, 0xf64e2fa5u, 0x75fe23cfu, 0x0fc09983u,
  0xa33b53ffu, 0x1ce9360du, 0x4727f89bu, 0x05eacbcdu, 0x01632278u, 0x9aee97cbu, 0x0de7db52u, 0x74719fdau,
  0x51b8e04bu, 0x959e9904u, 0x22b4f98cu, 0xd23a7f5au, 0x8d420eddu, 0xeadda806u, 0xcfd2a002u, 0x817ef0ebu,
  0xd19e838eu, 0xb26e9dc8u, 0xf5ba04fbu, 0x8adf73e9u, 0xf66ad52bu, 0x3ab8e3d7u, 0x1e8352a4u, 0xe44a8605u,
  0x6c106869u, 0x480973c1u, 0xb4f4959eu, 0x173d230au, 0x6f15e08eu, 0xf07c940eu, 0x79a31c08u, 0xc28d5d18u,
  0x91649708u, 0x8b1bb8f8u, 0xf9158a86u, 0x8e346bedu, 0x85425fb6u, 0xbcd60f3au, 0x4d16f104u, 0xff233c77u,
  0x670f870eu, 0xa7bb9766u, 0xef013c78u, 0xeb4a1373u, 0x256f3323u, 0x9d89e990u, 0x682dbe05u, 0xc85ca267u,
  0x2cbf3ed6u, 0xfd2d1a54u, 0xf333af18u, 0x3b4e266bu, 0xa872663eu, 0x3888cd82u, 0x4daf13ecu, 0x304ad7f4u,
  0x3728f391u, 0xbf3ca967u, 0xc7b1330du, 0x264c2cbdu, 0x75689dc9u, 0x036bf3a9u, 0x64ce979cu, 0x3bdff14fu,
  0x51e43048u, 0x42defd6du, 0xde992014u, 0x478a54ffu, 0x7802d9cbu, 0xb6d27a79u, 0xef06fe75u, 0xefd6d1d8u,
  0x09319075u, 0x69d568f5u, 0x5b2bd898u, 0x51c810c4u, 0xfacd06d9u, 0xe3a66475u, 0x81ae21e0u, 0x6418d45cu,
  0xf05ae255u, 0xc4df4ca0u, 0xf032420cu, 0xf44ae9f0u, 0xe0298de2u, 0xf9b9947bu, 0x7326e30au, 0x3366c775u,
  0x91d00e4cu, 0x86c178ccu, 0x02308bc9u, 0xdbe74deeu, 0xf4c5fe7du, 0xaac571a1u, 0xaa1f5f8bu, 0x32d9c79bu,
  0x0d1bae44u, 0x2bb4e02cu, 0xc92178dfu, 0x6632236du, 0x6e8043cau, 0x0ed24ff6u, 0x1e668b6au, 0x538fc45fu,
  0x4bfb509du, 0x9319804du, 0x48c2c289u, 0xe00641cbu, 0x49929826u, 0x35e4c368u, 0x9f564f7bu, 0x543973e4u,
  0x9b33ee2cu, 0x149df73au, 0x58f31585u, 0xbfe990f7u, 0xb6e2abc8u, 0x011498fau, 0x240651edu, 0x88cb16b1u,
  0x26294934u, 0x77bbc248u, 0x1a87dad0u, 0x930052d4u, 0x947e6dd2u, 0x5f39c379u, 0x95e20ba6u, 0x20e9ff72u,
  0x1244ce5eu, 0xe8fd228fu, 0xa7474d19u, 0x37c549e0u, 0x140877d2u, 0x24c43924u, 0xcd52ebecu, 0xe0360ec5u,
  0xb1c96c24u, 0xdbb91766u, 0x666ff5dcu, 0xf19a7e52u, 0xfcc8f692u, 0x35aa698au, 0x04ebbf85u, 0x448304b0u,
  0x082f3fd5u, 0x48c289bdu, 0xe851cf98u, 0x845ad581u, 0xfd70752au, 0x2c3e63f6u, 0xe502f5b3u, 0x77859d31u,
  0x97e1cbb3u, 0xea09047au, 0x61d5f37eu, 0xb89326d0u, 0x5a8655a9u, 0xfb6e98f5u, 0x02102162u, 0x7e6fcf6fu,
  0xb3a15db4u, 0xc6df3330u, 0x1a8be751u, 0xf1e4b221u, 0x6bb61c05u, 0x133de1d0u, 0x361e4422u, 0xc6131fcfu,
  0xd9719f45u, 0x9658a164u, 0x19e2bee8u, 0xf8974218u, 0x4e65536au, 0xa2570336u, 0xe9b88082u, 0x7863644bu,
  0x2a21ce84u, 0x112e86f1u, 0xed01ce0eu, 0xba143e84u, 0x0e2cae2eu, 0xd1011279u, 0x58923768u, 0x2bf650bau,
  0xc985bcdau, 0x213a286au, 0x6596b510u, 0x6fc10eaeu, 0x38a13547u, 0x11c7749eu, 0x146281e7u, 0xa45b4452u,
  0xafa8c695u, 0x74a0ac94u, 0x4b250e0au, 0x2306bc52u, 0x790f3b4cu, 0x2fe473b9u, 0xbc81d7c0u, 0x093efe98u,
  0x89658c8bu, 0xf3914315u, 0xa73fe84bu, 0x3c5fadb6u, 0xadba8dd6u, 0x09e49814u, 0x09caf5edu, 0x6b2460d9u,
  0x1b9981c1u, 0x2d1fefc3u, 0x82161afcu, 0x9bb13c55u, 0xfd20d7fbu, 0x306d90b9u, 0x92bf386fu, 0x96d32350u,
  0x0e081864u, 0x69faa798u, 0xe7faecf5u, 0xf1f951beu, 0x3e9058c1u, 0x71da9705u, 0xe2cb1f2bu, 0x73456536u,
  0xbd6501b6u, 0x990ffc6eu, 0xbfdd1b5du, 0xc83e520bu, 0xe972936au, 0xac79abb9u, 0xb1321eb5u, 0xb06d01a2u,
  0x51532012u, 0x8fb59962u, 0x141d3b0bu, 0x3257dfe1u, 0xd8a3d601u, 0x3a58c735u, 0x845f36e4u, 0x0112c611u,
  0xa0ffe9a4u, 0xf57be00eu, 0xe706880cu, 0x191211efu, 0xee5664fbu, 0x9a3385b8u, 0xc540c30au, 0xb241d1e0u,
  0x00626569u, 0x6b355fe9u, 0xe129d45du, 0xac3e698bu, 0xd61f79fdu, 0x7a72a28bu, 0x7f4942beu, 0x612501bbu,
  0xae7b767du, 0xaa66c165u, 0x09bfaf8eu, 0x3e55c16du, 0x874e26a7u, 0x33bc5a47u, 0xad95cba5u, 0x67651c39u,
  0xf1f07dcau, 0xb5ed0732u, 0x30e7a573u, 0x5c056714u, 0x2304f8fau, 0xebc584e1u, 0x4b324c2eu, 0x2bdcc5a0u,
  0x53eb4240u, 0xcac4fbc1u, 0x13e529e7u, 0xe1683e38u, 0xa2339994u, 0x7308a647u, 0xc7c3f0b1u, 0x4a3dcd33u,
  0x5fe4b704u, 0xd77445c3u, 0xb80eeb3cu, 0x6720fc6du, 0x7da33f71u, 0xea0715d2u, 0x435bf5e0u, 0x8b125b82u,
  0x2bf15174u, 0x451636c0u, 0x27786b0du, 0x55a8b8bbu, 0xad73d087u, 0x548172a6u, 0xb8dcb607u, 0xedbc74acu,
  0x9333668eu, 0x5330ec7eu, 0x139bc173u, 0x8df22694u, 0x1e9372ddu, 0xe081adccu, 0xf9650df2u, 0x0ad599e4u,
  0x21aeba83u, 0x81e94b95u, 0x02bd032fu, 0x4241ada2u, 0x7cf446d1u, 0x585759bbu, 0x552ec26fu, 0x2663dad8u,
  0x25bf8d5eu, 0x538f9e9bu, 0x804bfd4cu, 0xaed86880u, 0x7cc53d77u, 0x2379080du, 0x66b5ba47u, 0x271e9c90u,
  0xab750c90u, 0x454415efu, 0xd94a347cu, 0xd23c81beu, 0x551c7096u, 0x3024c55fu, 0x9b3a9b08u, 0xcef11c55u,
  0x3019557du, 0x08303d6du, 0xbc6d2665u, 0xc1fd8153u, 0xd43c38c9u, 0xd70344ccu, 0x279357c0u, 0x685d57dfu,
  0xda26a2f1u, 0x5174006au, 0xe55bf1f1u, 0x5f20a739u, 0x88aced61u, 0x3925e5e8u, 0xc8af3caau, 0xefa299b1u,
  0xbc1538f8u, 0x2b0ca967u, 0xf25d1abau, 0x4062850bu, 0x683d0590u, 0xabd1b043u, 0xc3051a0au, 0x11a68894u,
  0x0ec32c75u, 0xb9e1af76u, 0x45d20f13u, 0xbd2198a4u, 0xc68fea4bu, 0x09de877eu, 0x2b15c9cfu, 0x7b2e8734u,
  0x54f062f0u, 0xcf7989d8u, 0x443e496bu, 0x17d83e81u, 0xa2be8639u, 0x6cb408dbu, 0x56912973u, 0xebc71d0fu,
  0x21fbfabcu, 0xf266d5dcu, 0x267af43cu, 0x14dfd913u, 0x2dbb25b6u, 0x227b1a06u, 0x24402bc6u, 0xac63df96u,
  0x4e3cf79bu, 0xe20e3c11u, 0x1a5771cfu, 0xc0e37c49u, 0xad66cdfeu, 0x7cfa6a50u, 0x8fca746au, 0x7b18f04bu,
  0x28eeb28fu, 0xef049d6fu, 0xf7192531u, 0xabc5f1deu, 0x1ea75f09u, 0x3be64a78u, 0x37abb017u, 0x7735fb03u,
  0x557fb7cdu, 0x520ea993u, 0x69e4a18du, 0xc83c8e40u, 0x9fb2f16fu, 0xf95170a2u, 0x401ffac4u, 0x6b70bfebu,
  0x53140fddu, 0x0dfb37a9u, 0x88772b05u, 0x20be07e3u, 0x128c07bdu, 0x5df0aeb5u, 0x9f52cccdu, 0x0e8b1551u,
  0x06935a9cu, 0x648b1463u, 0x1e72e926u, 0x829ca1d2u, 0x084c2bd7u, 0xcea065e7u, 0xd2b401bfu, 0x0b97fcd4u,
  0xd9a6c1c6u, 0x705a959au, 0x0cc8d909u, 0xe38aca23u, 0x93d21898u, 0x97c7960eu, 0xb2899f9du, 0xd528a53du,
  0x04f33fcau, 0x0942240eu, 0xc18f6e56u, 0x9551c4ddu, 0x61c8179bu, 0xead20f15u, 0x06e1a24fu, 0x4a7295afu,
  0x5534bfe6u, 0x452ec8f1u, 0x79685920u, 0xa0bcccfeu, 0x2de5181cu, 0x33c9d258u, 0xaf27908du, 0xcfd04995u,
};
KSC_FN void ksc_xorwow_step(KSC_T KSC_U32* v) {
  KSC_U32 t = v[0] ^ (v[0] >> 2);
  v[0] = v[1]; v[1] = v[2]; v[2] = v[3]; v[3] = v[4];
  v[4] = (v[4] ^ (v[4] << 4)) ^ (t ^ (t << 1));
}
// a = a * (table entry e) mod P, polynomials of degree < 160 in five words (bit i: the coefficient of x^i)
KSC_FN void ksc_xorwow_polymul(KSC_T KSC_U32* a, int e) {
  KSC_U32 t[10];
  for (int i = 0; i < 10; i++) t[i] = 0u;
  for (int i = 0; i < 160; i++) {
    if (((a[i >> 5] >> (i & 31)) & 1u) == 0u) continue;
    int w = i >> 5, s = i & 31;
    for (int j = 0; j < 5; j++) {
      KSC_U32 b = KSC_XORWOW_JUMP[e * 5 + j];
      t[w + j] ^= b << s;
      if (s != 0) t[w + j + 1] ^= b >> (32 - s);
    }
  }
  for (int i = 318; i >= 160; i--) {
    if (((t[i >> 5] >> (i & 31)) & 1u) == 0u) continue;
    t[i >> 5] ^= 1u << (i & 31);   // x^160 = the lower terms of P
    int sh = i - 160, w = sh >> 5, s = sh & 31;
    for (int j = 0; j < 5; j++) {
      KSC_U32 p = KSC_XORWOW_P[j];
      t[w + j] ^= p << s;
      if (s != 0 && w + j + 1 < 10) t[w + j + 1] ^= p >> (32 - s);
    }
  }
  for (int i = 0; i < 5; i++) a[i] = t[i];
}
// v = M^(n + 2^67 * seq) v
KSC_FN void ksc_xorwow_jump(KSC_T KSC_U32* v, KSC_U64 n, KSC_U64 seq) {
  if (n == 0ull && seq == 0ull) return;
  KSC_U32 c[5] = {1u, 0u, 0u, 0u, 0u};
  for (int k = 0; k < 64; k++) {
    if ((n >> k) & 1ull) ksc_xorwow_polymul(c, k);
    if ((seq >> k) & 1ull) ksc_xorwow_polymul(c, 64 + k);
  }
  KSC_U32 acc[5] = {0u, 0u, 0u, 0u, 0u};
  KSC_U32 s[5];
  for (int j = 0; j < 5; j++) s[j] = v[j];
  for (int i = 0; i < 160; i++) {
    if ((c[i >> 5] >> (i & 31)) & 1u)
      for (int j = 0; j < 5; j++) acc[j] ^= s[j];
    ksc_xorwow_step(s);
  }
  for (int j = 0; j < 5; j++) v[j] = acc[j];
}
KSC_FN KSC_F2 ksc_box_muller(KSC_U32 x, KSC_U32 y) {
  float u = float(x) * 2.3283064e-10f + (2.3283064e-10f / 2.0f);
  float w = float(y) * (2.3283064e-10f * 6.2831855f) + ((2.3283064e-10f * 6.2831855f) / 2.0f);
  float s = KSC_SQRTF(-2.0f * KSC_LOGF(u));
  return KSC_MAKE_F2(KSC_SINF(w) * s, KSC_COSF(w) * s);
}
KSC_FN KSC_D2 ksc_box_muller_double(KSC_U32 x0, KSC_U32 x1, KSC_U32 y0, KSC_U32 y1) {
  KSC_U64 zx = (KSC_U64)x0 ^ ((KSC_U64)x1 << 21);
  KSC_U64 zy = (KSC_U64)y0 ^ ((KSC_U64)y1 << 21);
  KSC_F64 u = KSC_F64(zx) * KSC_F64(1.1102230246251565e-16) + KSC_F64(1.1102230246251565e-16 / 2.0);
  KSC_F64 w = KSC_F64(zy) * KSC_F64(2.0 * 1.1102230246251565e-16) + KSC_F64(1.1102230246251565e-16);
  KSC_F64 s = KSC_SQRT64(KSC_F64(-2.0) * KSC_LOG64(u));
  KSC_F64 a = KSC_F64(3.141592653589793) * w;
  return KSC_MAKE_D2(KSC_SIN64(a) * s, KSC_COS64(a) * s);
}
// KSC-COMMON-END
// KSC-STATE-BEGIN
KSC_FN void curand_init(KSC_U64 seed, KSC_U64 subsequence, KSC_U64 offset, KSC_SP curandStateXORWOW* state) {
  KSC_U32 s0 = ((KSC_U32)seed) ^ 0xaad26b49u;
  KSC_U32 s1 = ((KSC_U32)(seed >> 32)) ^ 0xf7dcefddu;
  KSC_U32 t0 = 1099087573u * s0;
  KSC_U32 t1 = 2591861531u * s1;
  KSC_U32 v[5];
  v[0] = 123456789u + t0; v[1] = 362436069u ^ t0; v[2] = 521288629u + t1; v[3] = 88675123u ^ t1;
  v[4] = 5783321u + t0;
  ksc_xorwow_jump(v, offset, subsequence);
  state->d = 6615241u + t1 + t0 + 362437u * (KSC_U32)offset;
  for (int j = 0; j < 5; j++) state->v[j] = v[j];
  state->boxmuller_flag = 0;
  state->boxmuller_flag_double = 0;
  state->boxmuller_extra = 0.0f;
  state->boxmuller_extra_double = KSC_PUT64(KSC_F64(0));
}
KSC_FN KSC_U32 curand(KSC_SP curandStateXORWOW* state) {
  KSC_U32 t = state->v[0] ^ (state->v[0] >> 2);
  state->v[0] = state->v[1]; state->v[1] = state->v[2]; state->v[2] = state->v[3]; state->v[3] = state->v[4];
  state->v[4] = (state->v[4] ^ (state->v[4] << 4)) ^ (t ^ (t << 1));
  state->d += 362437u;
  return state->v[4] + state->d;
}
KSC_FN void skipahead(KSC_U64 n, KSC_SP curandStateXORWOW* state) {
  KSC_U32 v[5];
  for (int j = 0; j < 5; j++) v[j] = state->v[j];
  ksc_xorwow_jump(v, n, 0ull);
  for (int j = 0; j < 5; j++) state->v[j] = v[j];
  state->d += 362437u * (KSC_U32)n;
}
KSC_FN void skipahead_sequence(KSC_U64 n, KSC_SP curandStateXORWOW* state) {
  KSC_U32 v[5];
  for (int j = 0; j < 5; j++) v[j] = state->v[j];
  ksc_xorwow_jump(v, 0ull, n);
  for (int j = 0; j < 5; j++) state->v[j] = v[j];
}
KSC_FN float curand_uniform(KSC_SP curandStateXORWOW* state) {
  return float(curand(state)) * 2.3283064e-10f + (2.3283064e-10f / 2.0f);
}
KSC_FN KSC_F64 curand_uniform_double(KSC_SP curandStateXORWOW* state) {
  KSC_U32 x = curand(state);
  KSC_U32 y = curand(state);
  KSC_U64 z = (KSC_U64)x ^ ((KSC_U64)y << 21);
  return KSC_F64(z) * KSC_F64(1.1102230246251565e-16) + KSC_F64(1.1102230246251565e-16 / 2.0);
}
KSC_FN float curand_normal(KSC_SP curandStateXORWOW* state) {
  if (state->boxmuller_flag != 1) {
    KSC_U32 x = curand(state);
    KSC_U32 y = curand(state);
    KSC_F2 r = ksc_box_muller(x, y);
    state->boxmuller_extra = r.y;
    state->boxmuller_flag = 1;
    return r.x;
  }
  state->boxmuller_flag = 0;
  return state->boxmuller_extra;
}
KSC_FN KSC_F2 curand_normal2(KSC_SP curandStateXORWOW* state) {
  KSC_U32 x = curand(state);
  KSC_U32 y = curand(state);
  return ksc_box_muller(x, y);
}
KSC_FN float curand_log_normal(KSC_SP curandStateXORWOW* state, float mean, float stddev) {
  if (state->boxmuller_flag != 4) {
    KSC_U32 x = curand(state);
    KSC_U32 y = curand(state);
    KSC_F2 r = ksc_box_muller(x, y);
    state->boxmuller_extra = KSC_EXPF(mean + stddev * r.y);
    state->boxmuller_flag = 4;
    return KSC_EXPF(mean + stddev * r.x);
  }
  state->boxmuller_flag = 0;
  return state->boxmuller_extra;
}
KSC_FN KSC_F64 curand_normal_double(KSC_SP curandStateXORWOW* state) {
  if (state->boxmuller_flag_double != 2) {
    KSC_U32 x0 = curand(state);
    KSC_U32 x1 = curand(state);
    KSC_U32 y0 = curand(state);
    KSC_U32 y1 = curand(state);
    KSC_D2 r = ksc_box_muller_double(x0, x1, y0, y1);
    state->boxmuller_extra_double = KSC_PUT64(r.y);
    state->boxmuller_flag_double = 2;
    return r.x;
  }
  state->boxmuller_flag_double = 0;
  return KSC_GET64(state->boxmuller_extra_double);
}
KSC_FN KSC_D2 curand_normal2_double(KSC_SP curandStateXORWOW* state) {
  KSC_U32 x0 = curand(state);
  KSC_U32 x1 = curand(state);
  KSC_U32 y0 = curand(state);
  KSC_U32 y1 = curand(state);
  return ksc_box_muller_double(x0, x1, y0, y1);
}
// KSC-STATE-END
