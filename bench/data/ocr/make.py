"""Makes the OCR image set of bench/attachments.py and tests/knowledge/test_ocr.py: printed Chinese and English
text as a phone photographs it (menus, receipts, a meter reading, a notice), with its ground truth.

    .venv/bin/python bench/data/ocr/make.py            # writes the images and truth.json beside this file
    .venv/bin/python bench/data/ocr/make.py --smoke    # makes two in a temporary folder, checks truth.json agrees

Needs Debian's fonts-noto-cjk (`make browser-deps`, or `apt-get install -y fonts-noto-cjk`). The images it makes are
committed, so the bench and the tests never need the font; run it again only to change the set. Deterministic: the
same fonts and Pillow give the same files. Some images are turned a few degrees, blurred, noisy or saved as
low-quality JPEG, as photos are; each is phone-sized (1080x1440) or a receipt's narrow strip; two hold small
dense print.

Needs: `make install` (Pillow) and Debian's fonts-noto-cjk (`make browser-deps`).
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.common import Missing, bench_parser, smoke_check

HERE = Path(__file__).resolve().parent
FONTS = Path("/usr/share/fonts/opentype/noto")
SC = 2  # the Simplified Chinese face in Noto's CJK collections


@dataclass
class Sheet:
    """One image: its lines (text, size, bold, indent), its paper and what a camera did to it."""

    name: str
    lang: str  # "zh" or "en": the language its characters are counted in
    lines: list[tuple[str, int, bool, int]]
    size: tuple[int, int] = (1080, 1440)
    paper: tuple[int, int, int] = (250, 250, 246)
    ink: tuple[int, int, int] = (20, 20, 20)
    serif: bool = False
    rotate: float = 0.0
    noise: float = 0.0
    blur: float = 0.0
    jpeg: int = 0  # JPEG quality; 0: PNG
    right: dict[int, str] = field(default_factory=dict)  # line index -> text at the right edge (prices)


def _font(size: int, bold: bool, serif: bool) -> ImageFont.FreeTypeFont:
    family = "Serif" if serif else "Sans"
    return ImageFont.truetype(str(FONTS / f"Noto{family}CJK-{'Bold' if bold else 'Regular'}.ttc"), size, index=SC)


def render(sheet: Sheet) -> tuple[Image.Image, list[str]]:
    """The image and its lines of truth, top to bottom (a price on the right joins its line after a space)."""
    image = Image.new("RGB", sheet.size, sheet.paper)
    draw = ImageDraw.Draw(image)
    y = 70
    truth = []
    for index, (text, size, bold, indent) in enumerate(sheet.lines):
        font = _font(size, bold, sheet.serif)
        draw.text((60 + indent, y), text, font=font, fill=sheet.ink)
        line = text
        if index in sheet.right:
            price = sheet.right[index]
            width = draw.textlength(price, font=font)
            draw.text((sheet.size[0] - 60 - width, y), price, font=font, fill=sheet.ink)
            line = f"{text} {price}"
        if text.strip():
            truth.append(line)
        y += int(size * 1.65)
    return _camera(image, sheet), truth


def _camera(image: Image.Image, sheet: Sheet) -> Image.Image:
    rng = random.Random(sheet.name)
    if sheet.rotate:
        image = image.rotate(sheet.rotate, resample=Image.Resampling.BICUBIC, expand=False, fillcolor=(205, 200, 190))
    if sheet.blur:
        image = image.filter(ImageFilter.GaussianBlur(sheet.blur))
    if sheet.noise:
        noise = Image.effect_noise(image.size, sheet.noise).convert("RGB")
        image = Image.blend(image, noise, 0.12)
        # uneven light: a darker band, as under a phone's shadow
        shade = Image.new("L", image.size, 0)
        ImageDraw.Draw(shade).rectangle((0, rng.randint(200, 800), image.width, image.height), fill=40)
        image = Image.composite(Image.new("RGB", image.size, (0, 0, 0)), image, shade.point(lambda v: v // 2))
    return image


def sheets() -> list[Sheet]:
    """The set: seven Chinese, seven English."""
    h, b, n = 56, 44, 40
    return [
        Sheet(
            "zh_menu",
            "zh",
            [
                ("川味小馆 菜单", 64, True, 0),
                ("", 20, False, 0),
                ("宫保鸡丁", b, False, 0),
                ("鱼香肉丝", b, False, 0),
                ("麻婆豆腐", b, False, 0),
                ("水煮牛肉", b, False, 0),
                ("酸辣土豆丝", b, False, 0),
                ("米饭", b, False, 0),
                ("", 20, False, 0),
                ("营业时间：11:00-21:30", n, False, 0),
            ],
            right={2: "¥38", 3: "¥32", 4: "¥22", 5: "¥58", 6: "¥18", 7: "¥2"},
        ),
        Sheet(
            "zh_menu_photo",
            "zh",
            [
                ("早餐店价目表", 60, True, 0),
                ("", 20, False, 0),
                ("豆浆", b, False, 0),
                ("油条", b, False, 0),
                ("小笼包（一笼）", b, False, 0),
                ("茶叶蛋", b, False, 0),
                ("皮蛋瘦肉粥", b, False, 0),
                ("", 20, False, 0),
                ("本店支持微信和支付宝付款", n, False, 0),
            ],
            right={2: "3元", 3: "2元", 4: "15元", 5: "2.5元", 6: "8元"},
            rotate=2.5,
            noise=30,
            jpeg=70,
        ),
        Sheet(
            "zh_receipt",
            "zh",
            [
                ("华联超市 购物小票", 48, True, 0),
                ("单号：20260315-0871", 36, False, 0),
                ("日期：2026-03-15 18:42", 36, False, 0),
                ("", 16, False, 0),
                ("纯牛奶 250ml×12", 38, False, 0),
                ("全麦面包", 38, False, 0),
                ("苹果 1.2kg", 38, False, 0),
                ("", 16, False, 0),
                ("合计", 40, True, 0),
                ("实收", 38, False, 0),
                ("找零", 38, False, 0),
                ("谢谢惠顾，欢迎再次光临", 36, False, 0),
            ],
            size=(720, 1280),
            right={4: "46.80", 5: "12.50", 6: "15.36", 8: "74.66", 9: "100.00", 10: "25.34"},
            rotate=-1.5,
            jpeg=80,
        ),
        Sheet(
            "zh_meter",
            "zh",
            [
                ("电能表抄表记录", h, True, 0),
                ("", 20, False, 0),
                ("户号：0317-2251-08", n, False, 0),
                ("本月读数：08412.6 千瓦时", n, False, 0),
                ("上月读数：08127.3 千瓦时", n, False, 0),
                ("本月用电：285.3 千瓦时", n, False, 0),
                ("抄表日期：2026年3月20日", n, False, 0),
                ("抄表员：王建国", n, False, 0),
            ],
            paper=(236, 240, 232),
            blur=1.8,
            noise=40,
            jpeg=40,
        ),
        Sheet(
            "zh_notice",
            "zh",
            [
                ("停水通知", 68, True, 0),
                ("", 20, False, 0),
                ("各位居民：", n, False, 0),
                ("因管道维修，本小区将于", n, False, 40),
                ("3月22日8:00至17:00停止供水。", n, False, 0),
                ("请提前做好储水准备。", n, False, 0),
                ("给您带来不便，敬请谅解。", n, False, 40),
                ("", 20, False, 0),
                ("阳光花园物业服务中心", n, False, 380),
                ("2026年3月18日", n, False, 520),
            ],
            serif=True,
            rotate=-3.0,
        ),
        Sheet(
            "zh_hours",
            "zh",
            [
                ("门诊时间安排", 60, True, 0),
                ("", 20, False, 0),
                ("周一至周五 8:00-12:00", b, False, 0),
                ("下午 14:00-17:30", b, False, 0),
                ("周六 8:00-12:00", b, False, 0),
                ("周日及法定节假日休息", b, False, 0),
                ("急诊24小时开放", b, True, 0),
                ("咨询电话：010-6523 8810", n, False, 0),
            ],
            paper=(214, 214, 208),
            ink=(110, 110, 125),
            jpeg=35,
        ),
        Sheet(
            "en_menu",
            "en",
            [
                ("THE CORNER BISTRO", 64, True, 0),
                ("", 20, False, 0),
                ("Tomato soup", b, False, 0),
                ("Caesar salad", b, False, 0),
                ("Grilled salmon", b, False, 0),
                ("Mushroom risotto", b, False, 0),
                ("Apple pie", b, False, 0),
                ("", 20, False, 0),
                ("Open daily 11am to 10pm", n, False, 0),
            ],
            right={2: "$6.50", 3: "$9.00", 4: "$21.00", 5: "$16.50", 6: "$7.25"},
        ),
        Sheet(
            "en_menu_photo",
            "en",
            [
                ("Coffee & Tea", 60, True, 0),
                ("", 20, False, 0),
                ("Espresso", b, False, 0),
                ("Flat white", b, False, 0),
                ("Cappuccino", b, False, 0),
                ("Green tea", b, False, 0),
                ("Hot chocolate", b, False, 0),
                ("", 20, False, 0),
                ("Oat milk available on request", n, False, 0),
            ],
            right={2: "2.80", 3: "3.60", 4: "3.40", 5: "2.50", 6: "3.90"},
            rotate=-2.0,
            noise=30,
            jpeg=70,
        ),
        Sheet(
            "en_receipt",
            "en",
            [
                ("FRESH MART", 48, True, 0),
                ("Receipt No. 004517", 36, False, 0),
                ("2026-03-14 09:12", 36, False, 0),
                ("", 16, False, 0),
                ("Whole milk 2L", 38, False, 0),
                ("Bananas 1.1kg", 38, False, 0),
                ("Cheddar cheese", 38, False, 0),
                ("Orange juice", 38, False, 0),
                ("", 16, False, 0),
                ("TOTAL", 40, True, 0),
                ("Card payment", 38, False, 0),
                ("Thank you for shopping", 36, False, 0),
            ],
            size=(720, 1280),
            right={4: "3.49", 5: "1.87", 6: "4.20", 7: "2.99", 9: "12.55", 10: "12.55"},
            rotate=1.5,
            jpeg=80,
        ),
        Sheet(
            "en_meter",
            "en",
            [
                ("GAS METER READING", h, True, 0),
                ("", 20, False, 0),
                ("Account: 7730 1942 55", n, False, 0),
                ("Current reading: 04518 m3", n, False, 0),
                ("Previous reading: 04377 m3", n, False, 0),
                ("Used this period: 141 m3", n, False, 0),
                ("Read on 12 March 2026", n, False, 0),
            ],
            paper=(236, 240, 232),
            blur=1.8,
            noise=40,
            jpeg=40,
        ),
        Sheet(
            "en_notice",
            "en",
            [
                ("NOTICE", 72, True, 0),
                ("", 20, False, 0),
                ("The lift will be out of service", n, False, 0),
                ("on Saturday 21 March from 9am to 4pm", n, False, 0),
                ("for its annual safety inspection.", n, False, 0),
                ("Please use the stairs on the east side.", n, False, 0),
                ("We are sorry for the inconvenience.", n, False, 0),
                ("", 20, False, 0),
                ("Building Management", n, False, 500),
            ],
            serif=True,
            rotate=3.0,
        ),
        Sheet(
            "en_hours",
            "en",
            [
                ("Library Opening Hours", 56, True, 0),
                ("", 20, False, 0),
                ("Monday to Friday 9:00-20:00", b, False, 0),
                ("Saturday 10:00-17:00", b, False, 0),
                ("Sunday closed", b, False, 0),
                ("Returns box open 24 hours", b, True, 0),
                ("Questions? Call 555-0142", n, False, 0),
            ],
            paper=(214, 214, 208),
            ink=(110, 110, 125),
            jpeg=35,
        ),
        Sheet(
            "zh_terms",
            "zh",
            [
                ("会员须知", 40, True, 0),
                *[
                    (line, 26, False, 0)
                    for line in (
                        "一、会员卡仅限本人使用，不得转借他人。",
                        "二、每消费1元累计1积分，积分有效期为12个月。",
                        "三、积满500分可兑换价值20元的代金券一张。",
                        "四、代金券不找零，不与其他优惠同时使用。",
                        "五、生日当月凭会员卡享受九折优惠。",
                        "六、会员卡遗失请携带身份证到服务台补办，工本费10元。",
                        "七、本须知最终解释权归本店所有。",
                    )
                ],
            ],
            rotate=1.0,
            noise=25,
            jpeg=55,
        ),
        Sheet(
            "en_terms",
            "en",
            [
                ("Membership terms", 40, True, 0),
                *[
                    (line, 26, False, 0)
                    for line in (
                        "1. The card may only be used by its holder.",
                        "2. Every 1 dollar spent earns 1 point; points last 12 months.",
                        "3. 500 points can be exchanged for a 20 dollar voucher.",
                        "4. Vouchers give no change and cannot be combined.",
                        "5. Members get 10% off during their birthday month.",
                        "6. A lost card is replaced at the desk for a fee of 10 dollars.",
                        "7. These terms may change without notice.",
                    )
                ],
            ],
            rotate=1.0,
            noise=25,
            jpeg=55,
        ),
    ]


def write(chosen: list[Sheet], folder: Path) -> list[dict]:
    """Render `chosen` into `folder`; their truth rows."""
    truth = []
    for sheet in chosen:
        image, lines = render(sheet)
        name = f"{sheet.name}.{'jpg' if sheet.jpeg else 'png'}"
        if sheet.jpeg:
            image.save(folder / name, "JPEG", quality=sheet.jpeg, optimize=True)
        else:
            image.convert("L").save(folder / name, "PNG", optimize=True)
        truth.append({"file": name, "lang": sheet.lang, "width": image.width, "height": image.height, "lines": lines})
        print(f"{name:22} {(folder / name).stat().st_size / 1024:7.1f} KB")
    return truth


def main() -> None:
    args = bench_parser(__doc__, smoke="two of the images, made in a temporary folder").parse_args()
    if not (FONTS / "NotoSansCJK-Regular.ttc").is_file():
        raise Missing(f"no Noto CJK fonts in {FONTS}: run `make browser-deps` (or apt-get install -y fonts-noto-cjk).")
    if not args.smoke:
        truth = write(sheets(), HERE)
        (HERE / "truth.json").write_text(json.dumps(truth, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        return
    committed = {row["file"]: row for row in json.loads((HERE / "truth.json").read_text(encoding="utf-8"))}
    with tempfile.TemporaryDirectory() as folder:
        made = write([sheet for sheet in sheets() if sheet.name in ("zh_menu", "en_receipt")], Path(folder))
    smoke_check(
        f"{row['file']}: its truth differs from truth.json" for row in made if committed.get(row["file"]) != row
    )


if __name__ == "__main__":
    main()
