//! draid: OpenZFS's distributed-spare raidz (vdev_draid.c), read here: a pool with dRAID
//! vdevs imports read-only.
//!
//! A dRAID vdev of C children (S of them worth of distributed spare space) is made of raidz
//! redundancy groups of D data and P parity columns (groupwidth W = D + P), spread over the
//! N = C - S "disks" of each row through a permutation of the children:
//!
//! ```text
//!   row height  16 MiB (SPA_MAXBLOCKSIZE) on each child; group size  W · 16 MiB of the
//!   vdev's address space; the config's ngroups groups make a slice, and each slice uses
//!   the next permutation (of the 256 or 512 the map for C children has, round robin)
//!   group g = offset / groupsz   groupstart = (g · W) mod N   perm = g / ngroups
//!   row     = perm · (W · ngroups / N) + ((g mod ngroups) · W) / N
//!   child offset = row · 16 MiB + ((offset >> ashift) mod (16 MiB >> ashift · W)) / W sectors
//!   column i (0..W, parity first) is child perm_base[(groupstart + i) mod N] + iter
//!   (mod C), one row height further down from the column where the group wraps past N
//! ```
//!
//! A block fills whole rows of the group: s sectors give q = s / D sectors on every column
//! and one more on the first r + P columns (r = s mod D), the rest of the row being empty
//! sectors; its asize is ceil(s / D) · W sectors. Columns hold the block's bytes in order, as
//! raidz's do, and parity is raidz's P/Q/R over all D data columns (the empty ones count as
//! zeros). A block that reaches past the end of its group continues at the start of the next
//! one: two rows.
//!
//! The permutations are generated, not stored: for C children, the map (C, count, seed,
//! checksum) below seeds xorshift128+ with (0xd7a1d5eed, seed); each permutation is a
//! Fisher-Yates shuffle of the previous one (the first of 0, 1, ..., C-1), and fletcher4 over
//! all of them must give the checksum. These seeds are part of the format: OpenZFS published
//! them in vdev_draid.c and every dRAID pool depends on them.

use super::raidz::{RaidzCol, RaidzMap};
use super::{ReadMode, Vdev};
use crate::{Result, ZfsError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// xorshift128+'s first seed word for every map (VDEV_DRAID_SEED).
const DRAID_SEED: u64 = 0xd7a1d5eed;
/// The height of a row on each child (VDEV_DRAID_ROWHEIGHT).
pub const ROWHEIGHT: u64 = 16 << 20;
/// Limits vdev_draid_init checks.
const MAX_PARITY: u64 = 3;
const MAX_CHILDREN: u64 = 255;
const MAX_SPARES: u64 = 100;

/// (children, permutations, seed, fletcher4 word 0 of the permutations) for 2..=255 children.
const MAPS: [(u64, u64, u64, u64); 254] = [
    (2, 256, 0x89ef3dabbcc7de37, 0x433d433d),
    (3, 256, 0x89a57f3de98121b4, 0xbcd8b7b5),
    (4, 256, 0xc9ea9ec82340c885, 0x1819d7c69),
    (5, 256, 0xf46733b7f4d47dfd, 0x2a1648d74),
    (6, 256, 0x88c3c62d8585b362, 0x3d3b0c2c4),
    (7, 256, 0x3a65d809b4d1b9d5, 0x55c4183ee),
    (8, 256, 0xe98930e3c5d2e90a, 0x6edfb0329),
    (9, 256, 0x5a5430036b982ccb, 0x8ceaf6934),
    (10, 256, 0x92bf389e9eadac74, 0xb26668c09),
    (11, 256, 0x74ccebf1dcf3ae80, 0xdd691358c),
    (12, 256, 0x8847e41a1a9f5671, 0x10a0c63c8e),
    (13, 256, 0x7481b56debf0e637, 0x1424121fe4),
    (14, 256, 0x559b8c44065f8967, 0x16ab2ff079),
    (15, 256, 0x34c49545a2ee7f01, 0x1a6028efd6),
    (16, 256, 0xb85f4fa81a7698f7, 0x1e95ff5e66),
    (17, 256, 0x6353e47b7e47aba0, 0x21a81fa0fe),
    (18, 256, 0xaa549746b1cbb81c, 0x26f02494c9),
    (19, 256, 0x892e343f2f31d690, 0x29eb392835),
    (20, 256, 0x76914824db98cc3f, 0x3004f31a7c),
    (21, 256, 0x4b3cbabf9cfb1d0f, 0x36363a2408),
    (22, 256, 0xf45c77abb4f035d4, 0x38dd0f3e84),
    (23, 256, 0x5e18bd7f3fd4baf4, 0x3f0660391f),
    (24, 256, 0xa7b3a4d285d6503b, 0x443dfc9ff6),
    (25, 256, 0x56ac7dd967521f5a, 0x4b03a87eb7),
    (26, 256, 0x3a42dfda4eb880f7, 0x522c719bba),
    (27, 256, 0xd200d2fc6b54bf60, 0x5760b4fdf5),
    (28, 256, 0xc52605bbd486c546, 0x5e00d8f74c),
    (29, 256, 0xc761779e63cd762f, 0x67be3cd85c),
    (30, 256, 0xca577b1e07f85ca5, 0x6f5517f3e4),
    (31, 256, 0xfd50a593c518b3d4, 0x7370e7778f),
    (32, 512, 0xc6c87ba5b042650b, 0xf7eb08a156),
    (33, 512, 0xc3880d0c9d458304, 0x10734b5d160),
    (34, 512, 0xe920927e4d8b2c97, 0x118c1edbce0),
    (35, 512, 0x8da7fcda87bde316, 0x12a3e9f9110),
    (36, 512, 0xcf09937491514a29, 0x13bd6a24bef),
    (37, 512, 0x9b5abbf345cbd7cc, 0x14b9d90fac3),
    (38, 512, 0x506312a44668d6a9, 0x15e1b5f6148),
    (39, 512, 0x71659ede62b4755f, 0x173ef029bcd),
    (40, 512, 0xa7fde73fb74cf2d7, 0x1866fb72748),
    (41, 512, 0x19e8b461a1dea1d3, 0x1a046f76b23),
    (42, 512, 0x031c9b868cc3e976, 0x1afa64c49d3),
    (43, 512, 0xbaa5125faa781854, 0x1c76789e278),
    (44, 512, 0x4ed55052550d721b, 0x1d800ccd8eb),
    (45, 512, 0x0fd63ddbdff90677, 0x1f08ad59ed2),
    (46, 512, 0x36d66546de7fdd6f, 0x2016f09574b),
    (47, 512, 0x99f997e7eafb69d7, 0x21e42e47cb6),
    (48, 512, 0xbecd9c2571312c5d, 0x2320fe2872b),
    (49, 512, 0xd97371329e488a32, 0x24cd73f2ca7),
    (50, 512, 0x30e9b136670749ee, 0x2681c83b0e0),
    (51, 512, 0x11ad6bc8f47aaeb4, 0x27e9261b5d5),
    (52, 512, 0x68e445300af432c1, 0x29aa0eb7dbf),
    (53, 512, 0x910fb561657ea98c, 0x2b3dca04853),
    (54, 512, 0xd619693d8ce5e7a5, 0x2cc280e9c97),
    (55, 512, 0x24e281f564dbb60a, 0x2e9fa842713),
    (56, 512, 0x947a7d3bdaab44c5, 0x3046680f72e),
    (57, 512, 0x2d44fec9c093e0de, 0x324198ba810),
    (58, 512, 0x87743c272d29bb4c, 0x33ec48c9ac9),
    (59, 512, 0x96aa3b6f67f5d923, 0x34faead902c),
    (60, 512, 0x94a4f1faf520b0d3, 0x37d713ab005),
    (61, 512, 0xb13ed3a272f711a2, 0x397368f3cbd),
    (62, 512, 0x3b1b11805fa4a64a, 0x3b8a5e2840c),
    (63, 512, 0x4c74caad9172ba71, 0x3d4be280290),
    (64, 512, 0x035ff643923dd29e, 0x3fad6c355e1),
    (65, 512, 0x768e9171b11abd3c, 0x40eb07fed20),
    (66, 512, 0x75880e6f78a13ddd, 0x4433d6acf14),
    (67, 512, 0x910b9714f698a877, 0x451ea65d5db),
    (68, 512, 0x87f5db6f9fdcf5c7, 0x4732169e3f7),
    (69, 512, 0x836d4968fbaa3706, 0x4954068a380),
    (70, 512, 0xc567d73a036421ab, 0x4bd7cb7bd3d),
    (71, 512, 0x619df40f240b8fed, 0x4e376c2e972),
    (72, 512, 0x42763a680d5bed8e, 0x5084275c680),
    (73, 512, 0x5866f064b3230431, 0x52906f2c9ab),
    (74, 512, 0x9fa08548b1621a44, 0x54708019247),
    (75, 512, 0xb6053078ce0fc303, 0x572cc5c72b0),
    (76, 512, 0x4a7aad7bf3890923, 0x58e987bc8e9),
    (77, 512, 0xe165613fd75b5a53, 0x5c20473a211),
    (78, 512, 0x3ff154ac878163a6, 0x5d659194bf3),
    (79, 512, 0x24b93ade0aa8a532, 0x60a201c4f8e),
    (80, 512, 0xc18e2d14cd9bb554, 0x62c55cfe48c),
    (81, 512, 0x98cc78302feb58b6, 0x66656a07194),
    (82, 512, 0xc6c5fd5a2abc0543, 0x67cff94fbf8),
    (83, 512, 0xa7962f514acbba21, 0x6ab7b5afa2e),
    (84, 512, 0xba02545069ddc6dc, 0x6d19861364f),
    (85, 512, 0x447c73192c35073e, 0x6fce315ce35),
    (86, 512, 0x48beef9e2d42b0c2, 0x720a8e38b6b),
    (87, 512, 0x4874cf98541a35e0, 0x758382a2273),
    (88, 512, 0xad4cf8333a31127a, 0x781e1651b1b),
    (89, 512, 0x47ae4859d57888c1, 0x7b27edbe5bc),
    (90, 512, 0x06f7723cfe5d1891, 0x7dc2a96d8eb),
    (91, 512, 0xd4e44218d660576d, 0x80ac46f02d5),
    (92, 512, 0x7066702b0d5be1f2, 0x832c96d154e),
    (93, 512, 0x011209b4f9e11fb9, 0x85eefda104c),
    (94, 512, 0x47ffba30a0b35708, 0x899badc32dc),
    (95, 512, 0x1a95a6ac4538aaa8, 0x8b6b69a42b2),
    (96, 512, 0xbda2b239bb2008eb, 0x8f22d2de38a),
    (97, 512, 0x7ffa0bea90355c6c, 0x92e5b23b816),
    (98, 512, 0x1d56ba34be426795, 0x94f482e5d1b),
    (99, 512, 0x0aa89d45c502e93d, 0x977d94a98ce),
    (100, 512, 0x54369449f6857774, 0x9c06c9b34cc),
    (101, 512, 0xf7d4dd8445b46765, 0x9e5dc542259),
    (102, 512, 0xfa8866312f169469, 0xa16b54eae93),
    (103, 512, 0xd8a5aea08aef3ff9, 0xa381d2cbfe7),
    (104, 512, 0x66bcd2c3d5f9ef0e, 0xa8191817be7),
    (105, 512, 0x3fb13a47a012ec81, 0xab562b9a254),
    (106, 512, 0x43100f01c9e5e3ca, 0xaeee84c185f),
    (107, 512, 0xca09c50ccee2d054, 0xb1c359c047d),
    (108, 512, 0xd7176732ac503f9b, 0xb578bc52a73),
    (109, 512, 0xed206e51f8d9422d, 0xb8083e0d960),
    (110, 512, 0x17ead5dc6ba0dcd6, 0xbcfb1a32ca8),
    (111, 512, 0x5f1dc21e38a969eb, 0xc0171becdd6),
    (112, 512, 0xddaa973de33ec528, 0xc3edaba4b95),
    (113, 512, 0x2a5eccd7735a3630, 0xc630664e7df),
    (114, 512, 0xafcccee5c0b71446, 0xcb65392f6e4),
    (115, 512, 0x8fa30c5e7b147e27, 0xcd4db391e55),
    (116, 512, 0x5afe0711fdfafd82, 0xd08cb4ec35d),
    (117, 512, 0x533a6090238afd4c, 0xd336f115d1b),
    (118, 512, 0x90cf11b595e39a84, 0xd8e041c2048),
    (119, 512, 0x0d61a3b809444009, 0xdcb798afe35),
    (120, 512, 0x7f34da0f54b0d114, 0xdf3922664e1),
    (121, 512, 0xa52258d5b72f6551, 0xe4d37a9872d),
    (122, 512, 0xc1de54d7672878db, 0xe6583a94cf6),
    (123, 512, 0x1d03354316a414ab, 0xebffc50308d),
    (124, 512, 0xcebdcc377665412c, 0xedee1997cea),
    (125, 512, 0x4ddd4c04b1a12344, 0xf21d64b373f),
    (126, 512, 0x64fc8f94e3973658, 0xf8f87a8896b),
    (127, 512, 0x68765f78034a334e, 0xfb8fe62197e),
    (128, 512, 0xaf36b871a303e816, 0xfec6f3afb1e),
    (129, 512, 0x2a4cbf73866c3a28, 0x1027febfe4e5),
    (130, 512, 0x9cb128aacdcd3b2f, 0x106aa8ac569d),
    (131, 512, 0x5511d41c55869124, 0x10bbd755ddf1),
    (132, 512, 0x42f92461937f284a, 0x10fb8bceb3b5),
    (133, 512, 0xe2d89a1cf6f1f287, 0x114cf5331e34),
    (134, 512, 0xdc631a038956200e, 0x116428d2adc5),
    (135, 512, 0xb2e5ac222cd236be, 0x11ca88e4d4d2),
    (136, 512, 0xbc7d8236655d88e7, 0x11e39cb94e66),
    (137, 512, 0x073e02d88d2d8e75, 0x123136c7933c),
    (138, 512, 0x3ddb9c3873166be0, 0x1280e4ec6d52),
    (139, 512, 0x7d3b1a845420e1b5, 0x12c2e7cd6a44),
    (140, 512, 0x60102308aa7b2a6c, 0x12fc490e6c7d),
    (141, 512, 0xdb22bb2f9eb894aa, 0x1343f5a85a1a),
    (142, 512, 0xd853f879a13b1606, 0x13bb7d5f9048),
    (143, 512, 0x001620a03f804b1d, 0x13e74cc794fd),
    (144, 512, 0xfdb52dda76fbf667, 0x1442d2f22480),
    (145, 512, 0xa9160110f66e24ff, 0x144b899f9dbb),
    (146, 512, 0x77306a30379ae03b, 0x14cb98eb1f81),
    (147, 512, 0x14f5985d2752319d, 0x14feab821fc9),
    (148, 512, 0xa4b8ff11de7863f8, 0x154a0e60b9c9),
    (149, 512, 0x44b345426455c1b3, 0x15999c3c569c),
    (150, 512, 0x272677826049b46c, 0x15c9697f4b92),
    (151, 512, 0x2f9216e2cd74fe40, 0x162b1f7bbd39),
    (152, 512, 0x706ae3e763ad8771, 0x1661371c55e1),
    (153, 512, 0xf7fd345307c2480e, 0x16e251f28b6a),
    (154, 512, 0x6e94e3d26b3139eb, 0x16f2429bb8c6),
    (155, 512, 0x5458bbfbb781fcba, 0x173efdeca1b9),
    (156, 512, 0xa80e2afeccd93b33, 0x17bfdcb78adc),
    (157, 512, 0x1e4ccbb22796cf9d, 0x1826fdcc39c9),
    (158, 512, 0x8fba4b676aaa3663, 0x1841a1379480),
    (159, 512, 0xf82b843814b315fa, 0x18886e19b8a3),
    (160, 512, 0x7f21e920ecf753a3, 0x191812ca0ea7),
    (161, 512, 0x48bb8ea2c4caa620, 0x192f310faccf),
    (162, 512, 0x5cdb652b4952c91b, 0x199e1d7437c7),
    (163, 512, 0x6ac1ba6f78c06cd4, 0x19cd11f82c70),
    (164, 512, 0x9faf5f9ca2669a56, 0x1a18d5431f6a),
    (165, 512, 0xaa57e9383eb01194, 0x1a9e7d253d85),
    (166, 512, 0x896967bf495c34d2, 0x1afb8319b9fc),
    (167, 512, 0xdfad5f05de225f1b, 0x1b3a59c3093b),
    (168, 512, 0xfd299a99f9f2abdd, 0x1bb6f1a10799),
    (169, 512, 0xdda239e798fe9fd4, 0x1bfae0c9692d),
    (170, 512, 0x5fca670414a32c3e, 0x1c22129dbcff),
    (171, 512, 0x1bb8934314b087de, 0x1c955db36cd0),
    (172, 512, 0xd96394b4b082200d, 0x1cfc8619b7e6),
    (173, 512, 0xb612a7735b1c8cbc, 0x1d303acdd585),
    (174, 512, 0x28e7430fe5875fe1, 0x1d7ed5b3697d),
    (175, 512, 0x5038e89efdd981b9, 0x1dc40ec35c59),
    (176, 512, 0x075fd78f1d14db7c, 0x1e31c83b4a2b),
    (177, 512, 0xc50fafdb5021be15, 0x1e7cdac82fbc),
    (178, 512, 0xe6dc7572ce7b91c7, 0x1edd8bb454fc),
    (179, 512, 0x21f7843e7beda537, 0x1f3a8e019d6c),
    (180, 512, 0xc83385e20b43ec82, 0x1f70735ec137),
    (181, 512, 0xca818217dddb21fd, 0x201ca44c5a3c),
    (182, 512, 0xe6035defea48f933, 0x2038e3346658),
    (183, 512, 0x47262a4f953dac5a, 0x20c2e554314e),
    (184, 512, 0xe24c7246260873ea, 0x21197e618d64),
    (185, 512, 0xeef6b57c9b58e9e1, 0x217ea48ecddc),
    (186, 512, 0x2becd3346e386142, 0x21c496d4a5f9),
    (187, 512, 0x63c6207bdf3b40a3, 0x220e0f2eec0c),
    (188, 512, 0x3056ce8989767d4b, 0x228eb76cd137),
    (189, 512, 0x91af61c307cee780, 0x22e17e2ea501),
    (190, 512, 0xda359da225f6d54f, 0x2358a2debc19),
    (191, 512, 0x0a5f7a2a55607ba0, 0x238a79dac18c),
    (192, 512, 0x27bb75bf5224638a, 0x2403a58e2351),
    (193, 512, 0x1ebfdb94630f5d0f, 0x2492a10cb339),
    (194, 512, 0x6eae5e51d9c5f6fb, 0x24ce4bf98715),
    (195, 512, 0x08d903b4daedc2e0, 0x250d1e15886c),
    (196, 512, 0xc722a2f7fa7cd686, 0x258a99ed0c9e),
    (197, 512, 0x8f71faf0e54e361d, 0x25dee11976f5),
    (198, 512, 0x87f64695c91a54e7, 0x264e00a43da0),
    (199, 512, 0xc719cbac2c336b92, 0x26d327277ac1),
    (200, 512, 0xe7e647afaf771ade, 0x27523a5c44bf),
    (201, 512, 0x12d4b5c38ce8c946, 0x273898432545),
    (202, 512, 0xf2e0cd4067bdc94a, 0x27e47bb2c935),
    (203, 512, 0x21b79f14d6d947d3, 0x281e64977f0d),
    (204, 512, 0x515093f952f18cd6, 0x289691a473fd),
    (205, 512, 0xd47b160a1b1022c8, 0x2903e8b52411),
    (206, 512, 0xc02fc96684715a16, 0x297515608601),
    (207, 512, 0xef51e68efba72ed0, 0x29ef73604804),
    (208, 512, 0x9e3be6e5448b4f33, 0x2a2846ed074b),
    (209, 512, 0x81d446c6d5fec063, 0x2a92ca693455),
    (210, 512, 0xff215de8224e57d5, 0x2b2271fe3729),
    (211, 512, 0xe2524d9ba8f69796, 0x2b64b99c3ba2),
    (212, 512, 0xf6b28e26097b7e4b, 0x2bd768b6e068),
    (213, 512, 0x893a487f30ce1644, 0x2c67f722b4b2),
    (214, 512, 0x386566c3fc9871df, 0x2cc1cf8b4037),
    (215, 512, 0x1e0ed78edf1f558a, 0x2d3948d36c7f),
    (216, 512, 0xe3bc20c31e61f113, 0x2d6d6b12e025),
    (217, 512, 0xd6c3ad2e23021882, 0x2deff7572241),
    (218, 512, 0xb4a9f95cf0f69c5a, 0x2e67d537aa36),
    (219, 512, 0x6e98ed6f6c38e82f, 0x2e9720626789),
    (220, 512, 0x2e01edba33fddac7, 0x2f407c6b0198),
    (221, 512, 0x559d02e1f5f57ccc, 0x2fb6a5ab4f24),
    (222, 512, 0xac18f5a916adcd8e, 0x304ae1c5c57e),
    (223, 512, 0x15789fbaddb86f4b, 0x306f6e019c78),
    (224, 512, 0xf4a9c36d5bc4c408, 0x30da40434213),
    (225, 512, 0xf640f90fd2727f44, 0x3189ed37b90c),
    (226, 512, 0xb5313d390d61884a, 0x31e152616b37),
    (227, 512, 0x4bae6b3ce9160939, 0x321f40aeac42),
    (228, 512, 0x838c34480f1a66a1, 0x32f389c0f78e),
    (229, 512, 0xb1c4a52c8e3d6060, 0x330062a40284),
    (230, 512, 0xe0f1110c6d0ed822, 0x338be435644f),
    (231, 512, 0x9f1a8ccdcea68d4b, 0x34045a4e97e1),
    (232, 512, 0x3261ed62223f3099, 0x34702cfc401c),
    (233, 512, 0xf2191e2311022d65, 0x3509dd19c9fc),
    (234, 512, 0xf102a395c2033abc, 0x35654dc96fae),
    (235, 512, 0x11fe378f027906b6, 0x35b5193b0264),
    (236, 512, 0xf777f2c026b337aa, 0x36704f5d9297),
    (237, 512, 0x1b04e9c2ee143f32, 0x36dfbb7af218),
    (238, 512, 0x2fcec95266f9352c, 0x3785c8df24a9),
    (239, 512, 0xfe2b0e47e427dd85, 0x37cbdf5da729),
    (240, 512, 0x72b49bf2225f6c6d, 0x382227c15855),
    (241, 512, 0x50486b43df7df9c7, 0x389b88be6453),
    (242, 512, 0x5192a3e53181c8ab, 0x38ddf3d67263),
    (243, 512, 0xe9f5d8365296fd5e, 0x399f1c6c9e9c),
    (244, 512, 0xc740263f0301efa8, 0x3a147146512d),
    (245, 512, 0x23cd0f2b5671e67d, 0x3ab10bcc0d9d),
    (246, 512, 0x002ccc7e5cd41390, 0x3ad6cd14a6c0),
    (247, 512, 0x9aafb3c02544b31b, 0x3b8cb8779fb0),
    (248, 512, 0x72ba07a78b121999, 0x3c24142a5a3f),
    (249, 512, 0x3d784aa58edfc7b4, 0x3cd084817d99),
    (250, 512, 0xaab750424d8004af, 0x3d506a8e098e),
    (251, 512, 0x84403fcf8e6b5ca2, 0x3d4c54c2aec4),
    (252, 512, 0x71eb7455ec98e207, 0x3e655715cf2c),
    (253, 512, 0xd752b4f19301595b, 0x3ecd7b2ca5ac),
    (254, 512, 0xc4674129750499de, 0x3e99e86d3e95),
    (255, 512, 0x9772baff5cd12ef5, 0x3f895c019841),
];

/// One step of xorshift128+ (vdev_draid_rand).
fn rand(s: &mut [u64; 2]) -> u64 {
    let s0 = s[0];
    let mut s1 = s[1];
    let r = s0.wrapping_add(s1).rotate_left(17).wrapping_add(s0);
    s1 ^= s0;
    s[0] = s0.rotate_left(49) ^ s1 ^ (s1 << 21);
    s[1] = s1.rotate_left(28);
    r
}

/// The permutations for `children` children (`count` rows of `children` bytes), generated
/// and checked against the map's checksum; kept once made.
fn perms(children: u64) -> Result<Arc<Vec<u8>>> {
    static MADE: OnceLock<Mutex<HashMap<u64, Arc<Vec<u8>>>>> = OnceLock::new();
    let made = MADE.get_or_init(Default::default);
    if let Some(p) = made.lock().unwrap_or_else(|p| p.into_inner()).get(&children) {
        return Ok(p.clone());
    }
    let &(c, count, seed, checksum) = MAPS
        .iter()
        .find(|m| m.0 == children)
        .ok_or_else(|| ZfsError::Invalid(format!("dRAID vdev with {children} children (no permutation map)")))?;
    let (c, count) = (c as usize, count as usize);
    let mut p = vec![0u8; c * count];
    let mut s = [DRAID_SEED, seed];
    let mut prev: Vec<u8> = (0..c as u8).collect();
    for i in 0..count {
        let row = &mut p[i * c..(i + 1) * c];
        row.copy_from_slice(&prev);
        for j in (1..c).rev() {
            let k = (rand(&mut s) % (j as u64 + 1)) as usize;
            row.swap(j, k);
        }
        prev.copy_from_slice(row);
    }
    if oxzfs_format::checksum::fletcher4(&p, true)[0] != checksum {
        return Err(ZfsError::Invalid(format!("dRAID permutation map for {children} children fails its checksum")));
    }
    let p = Arc::new(p);
    made.lock().unwrap_or_else(|p| p.into_inner()).insert(children, p.clone());
    Ok(p)
}

/// A dRAID vdev's layout (vdev_draid_config_t): from its config, checked as vdev_draid_init
/// checks it.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    pub ndata: u64,
    pub nparity: u64,
    pub nspares: u64,
    pub children: u64,
    pub ngroups: u64,
    perms: Arc<Vec<u8>>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.name())
    }
}

impl Config {
    pub fn new(ndata: u64, nparity: u64, nspares: u64, children: u64, ngroups: u64) -> Result<Config> {
        let bad = |what: &str| Err(ZfsError::Invalid(format!("dRAID vdev with {what} (draid{nparity}:{ndata}d:{children}c:{nspares}s, {ngroups} groups)")));
        if !(1..=MAX_PARITY).contains(&nparity) {
            return bad("a parity outside 1..3");
        }
        if !(2..=MAX_CHILDREN).contains(&children) {
            return bad("a child count outside 2..255");
        }
        // (Each bounded by the child count first: the sum cannot overflow.)
        if ndata == 0 || ndata > children || nspares > MAX_SPARES || ndata + nparity + nspares > children {
            return bad("more data, parity and spare columns than children");
        }
        if !(1..=MAX_CHILDREN).contains(&ngroups) || (ngroups * (ndata + nparity)) % (children - nspares) != 0 {
            return bad("a group count that does not fill its rows");
        }
        Ok(Config { ndata, nparity, nspares, children, ngroups, perms: perms(children)? })
    }

    /// Data plus parity columns of a group.
    pub fn groupwidth(&self) -> u64 {
        self.ndata + self.nparity
    }

    /// Children that hold groups (the rest of the space is distributed spare).
    fn ndisks(&self) -> u64 {
        self.children - self.nspares
    }

    fn groupsz(&self) -> u64 {
        self.groupwidth() * ROWHEIGHT
    }

    /// The name OpenZFS gives the vdev type (draid1:4d:6c:1s).
    pub fn name(&self) -> String {
        format!("draid{}:{}d:{}c:{}s", self.nparity, self.ndata, self.children, self.nspares)
    }

    /// Bytes a block of `psize` allocates (vdev_draid_asize): whole rows of the group.
    pub fn asize(&self, psize: u64, ashift: u8) -> u64 {
        if psize == 0 {
            return 0;
        }
        let rows = (psize - 1) / (self.ndata << ashift) + 1;
        (rows * self.groupwidth()) << ashift
    }

    /// The data bytes `asize` allocated bytes hold (vdev_draid_asize_to_psize).
    fn asize_to_psize(&self, asize: u64) -> u64 {
        asize / self.groupwidth() * self.ndata
    }

    /// Bytes of each child a slice covers (vdc_devslicesz): the span of one permutation.
    fn devslicesz(&self) -> u64 {
        self.groupsz() * self.ngroups / self.ndisks()
    }

    /// The child holding distributed spare `spare_id`'s bytes at `offset` (of a child's
    /// space): the permutation's last columns are the spares' (vdev_draid_spare_get_child).
    fn spare_child(&self, offset: u64, spare_id: u64) -> Option<usize> {
        (spare_id < self.nspares).then(|| self.child(offset / self.devslicesz(), self.children - 1 - spare_id))
    }

    /// The child of column `index` of a group at `groupstart` under permutation `perm`.
    fn child(&self, perm: u64, index: u64) -> usize {
        let c = self.children;
        let poff = perm % ((self.perms.len() as u64 / c) * c);
        let base = (poff / c * c) as usize;
        let iter = poff % c;
        ((u64::from(self.perms[base + index as usize]) + iter) % c) as usize
    }

    /// vdev_draid_logical_to_physical: (permutation, groupstart, offset on the group's first
    /// child) of logical `offset`.
    fn logical_to_physical(&self, offset: u64, ashift: u8) -> (u64, u64, u64) {
        let w = self.groupwidth();
        let n = self.ndisks();
        let rowheight = ROWHEIGHT >> ashift;
        let group = offset / self.groupsz();
        let groupstart = (group * w) % n;
        let b = (offset >> ashift) % (rowheight * w);
        let perm = group / self.ngroups;
        let row = perm * ((w * self.ngroups) / n) + ((group % self.ngroups) * w) / n;
        (perm, groupstart, (rowheight * row + b / w) << ashift)
    }

    /// The raidz rows of a block of `psize` bytes at logical `offset` (vdev_draid_map_alloc):
    /// one, or two when the block ends its group, each with the bytes of the block it holds.
    pub fn rows(&self, offset: u64, psize: u64, ashift: u8) -> Result<Vec<(RaidzMap, u64)>> {
        if psize == 0 || psize > super::raidz::RAIDZ_MAX_SIZE || ashift < 9 || ashift > 16 {
            return Err(ZfsError::Invalid(format!("dRAID I/O of {psize} bytes at ashift {ashift}")));
        }
        // The largest offset a dRAID of 255 children of 2^64 bytes could address, with room for
        // the block's rows: past it the arithmetic below could overflow.
        if offset.checked_add(2 * self.asize(psize, ashift) + self.groupsz()).is_none() {
            return Err(ZfsError::Invalid(format!("dRAID block of {psize} bytes at {offset:#x}: offset out of range")));
        }
        let mut out = Vec::with_capacity(2);
        let (mut at, mut left) = (offset, psize);
        while left > 0 {
            if out.len() == 2 {
                return Err(ZfsError::Invalid(format!("dRAID block of {psize} bytes at {offset:#x} spans more than two groups")));
            }
            let next_group = (at / self.groupsz() + 1) * self.groupsz();
            let mut size = left;
            if at + self.asize(size, ashift) > next_group {
                size = self.asize_to_psize(next_group - at);
                if size == 0 {
                    return Err(ZfsError::Invalid(format!("dRAID block at {at:#x} does not fit its group")));
                }
            }
            out.push((self.row(at, size, ashift), size));
            at += self.asize(size, ashift);
            left -= size;
        }
        Ok(out)
    }

    /// One row (vdev_draid_map_alloc_row): `size` bytes at `offset`, inside one group.
    fn row(&self, offset: u64, size: u64, ashift: u8) -> RaidzMap {
        let (perm, groupstart, mut phys) = self.logical_to_physical(offset, ashift);
        let (w, n, d, p) = (self.groupwidth(), self.ndisks(), self.ndata, self.nparity);
        let wrap = if groupstart + w > n { n - groupstart } else { w };
        let s = size.div_ceil(1 << ashift);
        let q = s / d;
        let r = s - q * d;
        let bc = if r == 0 { 0 } else { r + p };
        let mut cols = Vec::with_capacity(w as usize);
        for i in 0..w {
            if i == wrap {
                phys += ROWHEIGHT;
            }
            let c = (groupstart + i) % n;
            let sectors = if q == 0 && i >= bc {
                0
            } else if i < bc {
                q + 1
            } else {
                q
            };
            cols.push(RaidzCol { devidx: self.child(perm, c), offset: phys, size: sectors << ashift });
        }
        RaidzMap { cols, nparity: p as usize, ashift, data_size: s << ashift, skip: Vec::new() }
    }
}

/// The dRAID a distributed spare belongs to, set once its dRAID is built (`adopt_spares`):
/// weak, as the spare sits below it.
#[derive(Clone, Default)]
pub struct Parent(Arc<OnceLock<Weak<Vdev>>>);

impl Parent {
    pub fn get(&self) -> Option<Arc<Vdev>> {
        self.0.get().and_then(Weak::upgrade)
    }
}

impl PartialEq for Parent {
    fn eq(&self, _: &Parent) -> bool {
        true // a spare is told apart by its id and place, not by its link
    }
}

impl Eq for Parent {}

impl std::fmt::Debug for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "dRAID parent{}", if self.get().is_some() { "" } else { " (unset)" })
    }
}

/// Link the distributed spares in use below dRAID `vd` (under its `spare` or `replacing`
/// children) to it. A spare of another dRAID, or with an id past the dRAID's spares, is a
/// config OpenZFS does not make: refused.
pub fn adopt_spares(vd: &Arc<Vdev>, cfg: &Config) -> Result<()> {
    fn walk(v: &Vdev, top: &Arc<Vdev>, cfg: &Config) -> Result<()> {
        for c in &v.children {
            if let super::VdevKind::DraidSpare { spare_id, parent } = &c.kind {
                if *spare_id >= cfg.nspares {
                    return Err(ZfsError::Invalid(format!("dRAID spare {} has id {spare_id}; {} has {} spares", c.display_name(), top.display_name(), cfg.nspares)));
                }
                let _ = parent.0.set(Arc::downgrade(top));
            }
            walk(c, top, cfg)?;
        }
        Ok(())
    }
    walk(vd, vd, cfg)
}

/// Read `size` bytes at `offset` of distributed spare `spare_id` (an offset of a child's
/// space, as the dRAID's columns give it): from the child of its dRAID that holds the spare's
/// column there, at the same offset (vdev_draid_spare_io_start).
pub fn read_spare(sp: &Vdev, spare_id: u64, parent: &Parent, offset: u64, size: u64, verify: &dyn Fn(&[u8]) -> bool, mode: &ReadMode) -> Result<Vec<u8>> {
    thread_local! {
        static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    let unavailable = |why: &str| ZfsError::Io {
        device: sp.display_name(),
        offset,
        source: std::io::Error::new(std::io::ErrorKind::NotFound, why.to_string()),
    };
    let top = parent.get().ok_or_else(|| unavailable("its dRAID is not open"))?;
    let super::VdevKind::Draid(cfg) = &top.kind else { return Err(unavailable("not below a dRAID")) };
    let child = cfg.spare_child(offset, spare_id).and_then(|c| top.children.get(c)).ok_or_else(|| unavailable("no child holds it"))?;
    // A spare's child may be a spare vdev holding another distributed spare: bounded.
    if DEPTH.with(|d| d.get()) >= 8 {
        return Err(unavailable("distributed spares nest too deep"));
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    let r = child.read_mode(offset, size, verify, mode);
    DEPTH.with(|d| d.set(d.get() - 1));
    r
}

/// Read `size` bytes at logical `offset` of dRAID vdev `vd` (vdev_draid_io_start's read):
/// each row as raidz reads one (data columns, then parity and reconstruction when a column
/// is missing or the checksum fails). For a block in two rows, each row is first taken as
/// read (rebuilt from parity where a column could not be read); when the whole does not
/// verify, each row in turn is searched for the bad columns with the other kept as it is.
pub fn read(vd: &Vdev, cfg: &Config, offset: u64, size: u64, verify: &dyn Fn(&[u8]) -> bool, mode: &ReadMode) -> Result<Vec<u8>> {
    if vd.children.len() as u64 != cfg.children {
        return Err(ZfsError::Invalid(format!("{} has {} children, its layout {}", vd.display_name(), vd.children.len(), cfg.children)));
    }
    if vd.asize > 0 && offset.checked_add(cfg.asize(size, vd.ashift)).is_none_or(|end| end > vd.asize) {
        return Err(ZfsError::Invalid(format!("read of {size:#x} bytes at {offset:#x} past the end of {} ({:#x} bytes)", vd.display_name(), vd.asize)));
    }
    let rows = cfg.rows(offset, size, vd.ashift)?;
    if let [(map, n)] = rows.as_slice() {
        return read_row(vd, map, offset, *n, verify, mode);
    }
    let plain = &super::READ_PLAIN;
    let base: Vec<Vec<u8>> = rows.iter().map(|(m, n)| super::raidz::read_map(vd, m, offset, *n, &|_| true, plain)).collect::<Result<_>>()?;
    if verify(&base.concat()) {
        return Ok(base.concat());
    }
    for (i, (m, n)) in rows.iter().enumerate() {
        let whole = |d: &[u8]| {
            let mut all = Vec::with_capacity(size as usize);
            for (j, b) in base.iter().enumerate() {
                all.extend_from_slice(if j == i { d } else { b });
            }
            verify(&all)
        };
        if let Ok(d) = read_row(vd, m, offset, *n, &whole, mode) {
            let mut all = Vec::with_capacity(size as usize);
            for (j, b) in base.iter().enumerate() {
                all.extend_from_slice(if j == i { &d } else { b });
            }
            return Ok(all);
        }
    }
    if let Some(d) = read_rows_without_children(vd, cfg, &rows, verify) {
        return Ok(d);
    }
    Err(ZfsError::Checksum { context: format!("vdev {} offset {offset:#x} size {size:#x}: no reconstruction verified", vd.display_name()) })
}

/// Combinations of children to count as wrong in every row of a two-row block at once, at
/// most this many: a child holds a column in both rows, so one bad child spoils both (what
/// OpenZFS's combinatorial reconstruction over the whole raidz map finds).
const CROSS_ROW_TRIES: usize = 20_000;

/// A two-row block with the columns of 1..=nparity children taken as wrong in both rows,
/// rebuilt from the parity of each, fewest children first; the first whole block that
/// verifies. Every column is read once; the combinations are tried in memory.
fn read_rows_without_children(vd: &Vdev, cfg: &Config, rows: &[(RaidzMap, u64)], verify: &dyn Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
    let plain = &super::READ_PLAIN;
    let mut read: HashMap<(usize, u64), Option<Vec<u8>>> = HashMap::new();
    let mut kids: Vec<usize> = Vec::new();
    for (m, _) in rows {
        for c in &m.cols {
            read.entry((c.devidx, c.offset)).or_insert_with(|| super::raidz::read_col(vd, c, plain));
            kids.push(c.devidx);
        }
    }
    kids.sort_unstable();
    kids.dedup();
    let mut tries = 0usize;
    for k in 1..=cfg.nparity as usize {
        let mut found = None;
        let mut attempt = |bad: &[usize]| -> bool {
            tries += 1;
            if tries > CROSS_ROW_TRIES {
                return true;
            }
            let reader = |c: &RaidzCol| if bad.contains(&c.devidx) { None } else { read.get(&(c.devidx, c.offset)).cloned().flatten() };
            let mut all = Vec::new();
            for (m, n) in rows {
                match super::raidz::read_map_with(vd, m, 0, *n, &|_| true, plain, &reader) {
                    Ok(d) => all.extend_from_slice(&d),
                    Err(_) => return false,
                }
            }
            if verify(&all) {
                found = Some(all);
                return true;
            }
            false
        };
        super::raidz::for_each_combination(&kids, k, &mut attempt);
        if found.is_some() || tries > CROSS_ROW_TRIES {
            return found;
        }
    }
    None
}

/// One row, as raidz reads it; when that fails, again with each column on a spare or
/// replacing child read from each of that child's sides in turn (its first readable side
/// was taken, which may be a side missing the block's txg, or a distributed spare whose
/// column lies on a lost child), as OpenZFS's mirror-like children give up the copies they
/// hold one after another.
fn read_row(vd: &Vdev, map: &RaidzMap, offset: u64, n: u64, verify: &dyn Fn(&[u8]) -> bool, mode: &ReadMode) -> Result<Vec<u8>> {
    let first = super::raidz::read_map(vd, map, offset, n, verify, mode);
    if first.is_ok() {
        return first;
    }
    let plain = &super::READ_PLAIN;
    for col in &map.cols {
        let Some(child) = vd.children.get(col.devidx).filter(|c| matches!(c.kind, super::VdevKind::ReplacingOrSpare(_))) else { continue };
        for side in &child.children {
            let reader = |c: &RaidzCol| {
                if c.devidx == col.devidx && c.size > 0 {
                    side.read_mode(c.offset, c.size, &|_| true, plain).ok().filter(|d| d.len() as u64 == c.size)
                } else {
                    super::raidz::read_col(vd, c, mode)
                }
            };
            if let Ok(d) = super::raidz::read_map_with(vd, map, offset, n, verify, mode, &reader) {
                return Ok(d);
            }
        }
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every map's permutations come out as OpenZFS made them: each row a permutation, and
    /// the whole matching the published checksum (a wrong generator fails all 254).
    #[test]
    fn every_permutation_map_matches_its_checksum() {
        for &(c, count, _, _) in MAPS.iter() {
            let p = perms(c).unwrap_or_else(|e| panic!("{c} children: {e}"));
            assert_eq!(p.len() as u64, c * count);
            for row in p.chunks(c as usize) {
                let mut seen = vec![false; c as usize];
                row.iter().for_each(|&x| seen[x as usize] = true);
                assert!(seen.iter().all(|&s| s), "{c} children: a row is not a permutation");
            }
        }
        assert!(perms(1).is_err() && perms(256).is_err());
    }

    /// `n` sparse files of `size` bytes in a fresh temporary directory, open as devices.
    fn file_devs(tag: &str, n: usize, size: u64) -> (std::path::PathBuf, Vec<Arc<dyn crate::vdev::BlockDevice>>) {
        let dir = std::env::temp_dir().join(format!("oxzfs-draid-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let devs = (0..n)
            .map(|i| {
                let p = dir.join(format!("c{i}"));
                std::fs::File::create(&p).unwrap().set_len(size).unwrap();
                Arc::new(crate::vdev::FileDevice::open(&p, true).unwrap()) as Arc<dyn crate::vdev::BlockDevice>
            })
            .collect();
        (dir, devs)
    }

    /// A block whose column on one child is held by the dRAID's distributed spare (the child
    /// missing, under a `spare` vdev with the spare beside it), with two more children lost:
    /// draid2 has no parity left, so the block reads back only if the spare's column is read
    /// from where the spare's permutation column puts it. With that copy wrong, it does not.
    #[test]
    fn a_distributed_spare_stands_in_for_its_child() {
        use crate::vdev::{test_node, VdevKind};
        use oxzfs_format::label::VDEV_LABEL_START_SIZE;
        let cfg = Config::new(3, 2, 1, 7, 6).unwrap();
        let (dir, devs) = file_devs("dspare", 7, 64 << 20);
        // 36 KiB at the start of the second row of sectors of group 1 (whose columns wrap).
        let data: Vec<u8> = (0..36u32 << 10).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let at = cfg.groupsz() + 5 * 4096;
        let rows = cfg.rows(at, data.len() as u64, 12).unwrap();
        let (map, n) = &rows[0];
        assert_eq!(*n, data.len() as u64);
        for (c, bytes) in map.cols.iter().zip(map.columns(&data).unwrap()) {
            devs[c.devidx].write_at(&bytes, c.offset + VDEV_LABEL_START_SIZE).unwrap();
        }
        // The spare's copy of the first data column's child.
        let col = map.cols[2];
        let spare_at = cfg.spare_child(col.offset, 0).unwrap();
        assert!(map.cols.iter().all(|c| c.devidx != spare_at), "the spare's column is no column of the group");
        let copy = map.columns(&data).unwrap()[2].clone();
        devs[spare_at].write_at(&copy, col.offset + VDEV_LABEL_START_SIZE).unwrap();
        let lost = [map.cols[0].devidx, map.cols[3].devidx];
        let build = || {
            let children = (0..7)
                .map(|i| {
                    let leaf = |dev| Arc::new(test_node(i as u64, VdevKind::Leaf { disk: false }, 12, dev, vec![]));
                    if i == col.devidx {
                        let spare = Arc::new(test_node(9, VdevKind::DraidSpare { spare_id: 0, parent: Parent::default() }, 12, None, vec![]));
                        Arc::new(test_node(i as u64, VdevKind::ReplacingOrSpare("spare".into()), 12, None, vec![leaf(None), spare]))
                    } else {
                        leaf((!lost.contains(&i)).then(|| devs[i].clone()))
                    }
                })
                .collect();
            let top = Arc::new(test_node(0, VdevKind::Draid(cfg.clone()), 12, None, children));
            adopt_spares(&top, &cfg).unwrap();
            top
        };
        let top = build();
        let got = top.read_mode(at, data.len() as u64, &|d| d == data.as_slice(), &crate::vdev::READ_PLAIN).unwrap();
        assert!(got == data);
        devs[spare_at].write_at(&vec![0u8; copy.len()], col.offset + VDEV_LABEL_START_SIZE).unwrap();
        assert!(top.read_mode(at, data.len() as u64, &|d| d == data.as_slice(), &crate::vdev::READ_PLAIN).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A block in two groups (draid1:4d:6c:1s, 32 KiB ending group 0) whose columns on one
    /// child are silently wrong in both rows: neither row can be fixed with the other taken
    /// as read, only by counting that child wrong in both at once.
    #[test]
    fn one_bad_child_across_both_rows_is_found() {
        use crate::vdev::{test_node, VdevKind};
        use oxzfs_format::label::VDEV_LABEL_START_SIZE;
        let cfg = Config::new(4, 1, 1, 6, 1).unwrap();
        let (dir, devs) = file_devs("2rows", 6, 48 << 20);
        let data: Vec<u8> = (0..32u32 << 10).map(|i| (i.wrapping_mul(2246822519) >> 11) as u8).collect();
        let at = cfg.groupsz() - (20 << 10);
        let rows = cfg.rows(at, data.len() as u64, 12).unwrap();
        assert_eq!(rows.len(), 2);
        let mut pos = 0usize;
        for (m, n) in &rows {
            for (c, bytes) in m.cols.iter().zip(m.columns(&data[pos..pos + *n as usize]).unwrap()) {
                devs[c.devidx].write_at(&bytes, c.offset + VDEV_LABEL_START_SIZE).unwrap();
            }
            pos += *n as usize;
        }
        // A child with a data column in both rows, its bytes wrong in both.
        let data_kids = |m: &RaidzMap| m.cols[m.nparity..].iter().filter(|c| c.size > 0).map(|c| c.devidx).collect::<Vec<_>>();
        let bad = *data_kids(&rows[0].0).iter().find(|k| data_kids(&rows[1].0).contains(k)).expect("a child in both rows");
        for (m, _) in &rows {
            let c = m.cols.iter().find(|c| c.devidx == bad).unwrap();
            devs[bad].write_at(&vec![0x5a; c.size as usize], c.offset + VDEV_LABEL_START_SIZE).unwrap();
        }
        let children = (0..6).map(|i| Arc::new(test_node(i as u64, VdevKind::Leaf { disk: false }, 12, Some(devs[i].clone()), vec![]))).collect();
        let top = test_node(0, VdevKind::Draid(cfg.clone()), 12, None, children);
        let got = top.read_mode(at, data.len() as u64, &|d| d == data.as_slice(), &crate::vdev::READ_PLAIN).unwrap();
        assert!(got == data);
        // Past the end of the vdev: refused, not read.
        let top = Vdev { asize: at, ..test_node(0, VdevKind::Draid(cfg.clone()), 12, None, top.children.clone()) };
        assert!(top.read_mode(at, data.len() as u64, &|_| true, &crate::vdev::READ_PLAIN).is_err());
        assert!(cfg.rows(u64::MAX - 4096, 4096, 12).is_err(), "an offset at the end of the address space");
        assert!(Config::new(u64::MAX, 1, 0, 6, 1).is_err(), "a data count that would overflow");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The layout of the block comment: rows of whole group widths, two rows for a block
    /// that ends its group, the columns of a row on distinct children.
    #[test]
    fn rows_follow_the_group_layout() {
        let cfg = Config::new(4, 1, 1, 6, 1).unwrap();
        assert_eq!(cfg.name(), "draid1:4d:6c:1s");
        // 16K at ashift 12: 4 data sectors, one row of 5 columns of one sector.
        assert_eq!(cfg.asize(16 << 10, 12), 20 << 10);
        assert_eq!(cfg.asize(4 << 10, 12), 20 << 10, "a lone sector still takes a whole row");
        let rows = cfg.rows(0, 16 << 10, 12).unwrap();
        assert_eq!(rows.len(), 1);
        let (m, n) = &rows[0];
        assert_eq!(*n, 16 << 10);
        assert_eq!(m.cols.len(), 5);
        assert!(m.cols.iter().all(|c| c.size == 4096 && c.offset == 0));
        let mut kids: Vec<usize> = m.cols.iter().map(|c| c.devidx).collect();
        kids.sort_unstable();
        kids.dedup();
        assert_eq!(kids.len(), 5, "distinct children");
        // 4K: the first P + 1 columns hold a sector, the rest are empty.
        let (m, _) = &cfg.rows(20 << 10, 4 << 10, 12).unwrap()[0];
        assert_eq!(m.cols.iter().map(|c| c.size).collect::<Vec<_>>(), vec![4096, 4096, 0, 0, 0]);
        assert!(m.cols.iter().all(|c| c.offset == 4096), "the second row of sectors");
        // A block ending its group (groupsz 80 MiB) goes on in the next.
        let end = cfg.groupwidth() * ROWHEIGHT;
        let rows = cfg.rows(end - (20 << 10), 32 << 10, 12).unwrap();
        assert_eq!(rows.iter().map(|r| r.1).collect::<Vec<_>>(), vec![16 << 10, 16 << 10]);
        assert!(Config::new(4, 1, 2, 6, 1).is_err(), "more columns than children");
        assert!(Config::new(4, 4, 0, 9, 1).is_err(), "parity 4");
    }
}
